"""GRPO objective options from methods.md §5, as a `GRPOTrainer` subclass.

Each option is off by default and changes TRL 1.16's GRPO only where stated:

- **Zero-variance group filter** (ARLArena, `filter_zero_variance`). TRL's own behaviour:
  a group whose rewards are all equal gets advantage 0 for every completion (reward minus
  group mean), so with `beta=0` it adds no policy gradient, but its tokens still count in
  the `dapo` loss normaliser (diluting the other groups' gradient) and, with `beta>0`, the KL
  term still acts on it. The filter drops those completions from the loss mask and from the
  normaliser. When it drops every group of a generation batch, the policy's forward and
  backward are skipped (the loss and every gradient are 0 either way). Logged:
  `filter/zero_variance_groups` (share of groups dropped), `filter/loss_skipped`.
- **Success-rate-aware advantage weighting** (ProxMO, `success_weighting = α`), **ours**:
  with p the group's success rate (share of completions whose total reward reaches
  `success_threshold`), each advantage is multiplied by `1 + α·(1 − p)` when positive (rare
  successes count more) and by `1 + α·p` when negative (failing where the group mostly
  succeeds counts more). Logged: `advantage/success_weight_mean`.
- **Entropy-aware clipping** (SWE-Fuse, `entropy_clip_beta = β`), **ours**: per token,
  `ε_hi = ε0·(1 + β·H̃)` where ε0 is `epsilon_high` (default `epsilon`) and H̃ is the
  policy's token entropy divided by ln(vocabulary size), in [0, 1]; ε_low stays `epsilon`.
  TRL clips `clamp(ratio, 1 − ε_low, 1 + ε_hi)`; here ε_hi becomes a per-token tensor for
  the duration of one loss computation. Note: the ratio is exactly 1 when every generation
  is used for one optimizer step (`num_iterations=1`, `steps_per_generation` = accumulation
  steps, TRL's default), so clipping only acts with `num_iterations > 1` or several
  optimizer steps per generation. Logged: `clip/epsilon_high_mean`.

trl and torch are imported inside `trainer_class()`.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ObjectiveOptions(BaseModel):
    """The §5 switches (all off by default)."""

    model_config = ConfigDict(extra="forbid")

    filter_zero_variance: bool = False
    success_weighting: float = Field(0.0, ge=0.0)  # α; 0 = off
    success_threshold: float = 1.0  # total reward that counts as a success
    entropy_clip_beta: float = Field(0.0, ge=0.0)  # β; 0 = off

    @property
    def active(self) -> bool:
        return self.filter_zero_variance or self.success_weighting > 0 or self.entropy_clip_beta > 0


def success_weights(rewards: Any, advantages: Any, num_generations: int, alpha: float,
                    threshold: float = 1.0) -> Any:
    """Per-completion weights `1 + α(1 − p)` (advantage > 0) or `1 + αp` (advantage < 0), 1 otherwise.

    `rewards` and `advantages` are 1-D tensors grouped by consecutive `num_generations`.
    """
    import torch

    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {num_generations}")
    success = (torch.nan_to_num(rewards, nan=-math.inf) >= threshold - 1e-6).float()
    p = success.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations)
    w = torch.ones_like(advantages)
    w = torch.where(advantages > 0, 1 + alpha * (1 - p), w)
    return torch.where(advantages < 0, 1 + alpha * p, w)


def zero_variance_groups(rewards: Any, num_generations: int) -> Any:
    """A per-completion bool tensor: True where the completion's group has equal rewards."""
    import torch

    grouped = torch.nan_to_num(rewards, nan=0.0).view(-1, num_generations)
    flat = (grouped.max(dim=1).values - grouped.min(dim=1).values) <= 1e-8
    return flat.repeat_interleave(num_generations)


def entropy_epsilon_high(entropies: Any, epsilon0: float, beta: float, vocab_size: int) -> Any:
    """`ε0·(1 + β·H/ln V)` per token (H in nats, clamped to [0, ln V])."""
    if vocab_size < 2:
        raise ValueError("vocab_size must be >= 2")
    log_v = math.log(vocab_size)
    return epsilon0 * (1 + beta * (entropies.detach().float().clamp(0, log_v) / log_v))


def trainer_class(options: ObjectiveOptions) -> type:
    """`trl.GRPOTrainer`, or a subclass applying `options` (see the module docstring)."""
    from trl import GRPOTrainer

    if not options.active:
        return GRPOTrainer

    import torch

    class TrajforgeGRPOTrainer(GRPOTrainer):
        objective = options

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
            total = (rewards_per_func * weights).nansum(dim=1)
            total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
            self._tf_rewards = total  # gathered over processes, like TRL's own
            return rewards_per_func

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            out = super()._generate_and_score_completions(inputs)
            mode = "train" if self.model.training else "eval"
            n_gen = self.num_generations if mode == "train" else self.num_generations_eval
            rewards = self._tf_rewards
            local = slice(self.accelerator.process_index * len(inputs),
                          (self.accelerator.process_index + 1) * len(inputs))
            if self.objective.success_weighting > 0:
                all_adv = torch.zeros_like(rewards)
                all_adv[local] = out["advantages"].to(rewards.device)
                w = success_weights(rewards, all_adv, n_gen, self.objective.success_weighting,
                                    self.objective.success_threshold)[local]
                out["advantages"] = out["advantages"] * w.to(out["advantages"].device)
                self._metrics[mode]["advantage/success_weight_mean"].append(w.float().mean().item())
            if self.objective.filter_zero_variance:
                flat = zero_variance_groups(rewards, n_gen)
                self._metrics[mode]["filter/zero_variance_groups"].append(flat.float().mean().item())
                keep = (~flat[local]).to(out["completion_mask"].device).long().unsqueeze(1)
                out["completion_mask"] = out["completion_mask"] * keep
                mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
                out["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
            return out

        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            if self.objective.entropy_clip_beta > 0 and kwargs.get("compute_entropy") and entropies is not None:
                vocab = self.model.config.get_text_config().vocab_size
                eps_hi = entropy_epsilon_high(entropies, self._tf_eps[1], self.objective.entropy_clip_beta, vocab)
                self.epsilon_high = eps_hi
                self.epsilon_low = torch.full_like(eps_hi, self._tf_eps[0])
                mode = "train" if self.model.training else "eval"
                self._metrics[mode]["clip/epsilon_high_mean"].append(eps_hi.mean().item())
            return logps, entropies, aux

        def _compute_loss(self, model: Any, inputs: Any) -> Any:
            if self.objective.filter_zero_variance:
                # Every group of the generation batch, on every process, dropped: the loss is 0
                # and so is every gradient. The policy's forward and backward (half a step on
                # the CPU) are skipped; a zero loss over the parameters keeps the backward and
                # the optimizer step as they were (zero gradients).
                skip = float(inputs["num_items_in_batch"]) == 0
                self._metrics["train" if self.model.training else "eval"]["filter/loss_skipped"].append(float(skip))
                if skip:
                    return sum((p * 0).sum() for p in model.parameters() if p.requires_grad)
            self._tf_eps = (float(self.epsilon_low), float(self.epsilon_high))
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self.epsilon_low, self.epsilon_high = self._tf_eps

    return TrajforgeGRPOTrainer
