"""Tools every customer-service world offers, written once.

A world's `tools.py` binds them to names in its namespace, which is what `collect_tools`
reads (a tool's place among the world's tools is where it is bound):

    from envs.stock_tools import calculate_tool, transfer_tool
    calculate = calculate_tool()
    transfer_to_human_agents = transfer_tool("customer")
"""

from __future__ import annotations

import ast
import operator
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from envs.tools import ToolError, tool

_PARSING = threading.Lock()
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.USub: operator.neg}
TRANSFER_TOOL = "transfer_to_human_agents"


def _calculate(db: sqlite3.Connection, expression: str) -> dict:
    """Evaluate an arithmetic expression with + - * / and parentheses, e.g. "2 * (180 + 30)".

    Args:
        expression: The expression to evaluate.
    """

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ToolError("BAD_EXPRESSION", "only numbers, + - * / and parentheses are allowed")

    if len(expression) > 500:
        raise ToolError("BAD_EXPRESSION", "the expression is longer than 500 characters")
    try:
        with _PARSING:  # CPython 3.11's AST constructor is not safe in two threads at once
            tree = ast.parse(expression, mode="eval")
        value = ev(tree)
    except (SyntaxError, ZeroDivisionError, OverflowError, RecursionError) as exc:
        raise ToolError("BAD_EXPRESSION", str(exc)) from exc
    return {"result": round(value, 2)}


def calculate_tool() -> Callable[..., Any]:
    """The `calculate` tool (arithmetic the agent should not do in its head)."""

    def calculate(db: sqlite3.Connection, expression: str) -> dict:
        return _calculate(db, expression)

    calculate.__doc__ = _calculate.__doc__
    return tool()(calculate)


def transfer_tool(who: str = "user") -> Callable[..., Any]:
    """The `transfer_to_human_agents` tool, its description naming the world's `who`
    ("customer", "patient", ...)."""

    @tool()
    def transfer_to_human_agents(db: sqlite3.Connection, summary: str) -> dict:
        return {"transferred": True, "summary": summary}

    transfer_to_human_agents.__doc__ = f"""Transfer the {who} to a human agent, with a short summary of their issue. Use only
    when the request cannot be handled within the policy and the {who} insists.

    Args:
        summary: What the {who} needs and why it cannot be done here.
    """
    return transfer_to_human_agents
