"""The retail world: a folder loaded by path (see envs/world.py)."""
