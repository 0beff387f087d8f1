"""Turn a training cell into a program: a function, or a script; syntax errors, free names.

A cell with a top-level `return` (or `yield`) becomes the body of `def <name>(<args>):`, its
return value the job's result. Any other cell is a script: it runs as module-level code of
`__main__`, as `python cell.py` would (so classes pickle, `if __name__ == "__main__":` blocks
and `from __future__` imports work as in a file). Either way the generated source keeps the
cell's line numbers (the magic line is line 1). Lines that continue a multi-line string
literal are not indented (that would change the string). Everything here is pure.
"""

from __future__ import annotations

import ast
import builtins
import io
import symtable
import textwrap
import tokenize
from dataclasses import dataclass

from ..errors import ValidationError
from ..program import MAX_SCRIPT_BYTES

#: The name of the function a cell becomes (shows up in remote tracebacks).
FUNC_NAME = "kf_train_cell"

#: Names the job's runner module always has (it executes the function in `__main__`).
MODULE_DUNDERS = frozenset(
    {"__name__", "__doc__", "__file__", "__builtins__", "__spec__", "__loader__", "__package__"}
)

#: Names IPython adds to builtins in a kernel; they do not exist in the job.
_IPYTHON_BUILTINS = frozenset({"get_ipython", "display", "__IPYTHON__", "__IPYTHON__active"})


def remote_builtins() -> frozenset[str]:
    """The builtin names a plain Python process has (IPython's additions removed)."""
    return frozenset(dir(builtins)) - _IPYTHON_BUILTINS


class CellSyntaxError(ValidationError):
    """The cell does not parse; the message points at the cell's own line."""


@dataclass(frozen=True)
class CellFunction:
    """The generated function source and what it needs."""

    source: str
    name: str
    args: tuple[str, ...]
    free_names: tuple[str, ...]
    #: The script the job runs when the cell has no top-level return ('' for a function).
    script_source: str = ""

    @property
    def is_script(self) -> bool:
        """The cell runs as module-level code (`__main__`), not as a function."""
        return bool(self.script_source)


#: sys.argv[0] of a training cell in the job (argparse prints it as the program's name).
CELL_ARGV0 = "cell.py"


def _returns_at_top(tree: ast.Module) -> bool:
    """A `return`/`yield` outside any def, lambda or class: the cell is a function body."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return | ast.Yield | ast.YieldFrom):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _future_imports(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line, text) of the leading `from __future__ import ...` statements.

    Empty when none, or when one shares a line with other code (then it is not moved).
    """
    stmts = list(tree.body)
    if stmts and isinstance(stmts[0], ast.Expr) and isinstance(stmts[0].value, ast.Constant):
        stmts = stmts[1:] if isinstance(stmts[0].value.value, str) else stmts
    out: list[tuple[int, int, str]] = []
    for st in stmts:
        if not (isinstance(st, ast.ImportFrom) and st.module == "__future__"):
            break
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in st.names)
        out.append((st.lineno, st.end_lineno or st.lineno, f"from __future__ import {names}"))
    lines = {n for first, last, _ in out for n in range(first, last + 1)}
    for st in tree.body:
        if not (isinstance(st, ast.ImportFrom) and st.module == "__future__"):
            if lines & set(range(st.lineno, (st.end_lineno or st.lineno) + 1)):
                return []
    return out


def _hoisted(body: str, header: str, futures: list[tuple[int, int, str]]) -> str:
    """`header` + body with the `from __future__` imports moved to line 1, lines kept.

    Line 1 (the magic line's) holds the imports, the def takes the first import's line, the
    other import lines stay blank; what precedes the imports (comments, a docstring) stays at
    module level.
    """
    keep = _continuation_lines(body)
    lines = body.split("\n")
    if lines[-1] == "":
        lines.pop()
    first = futures[0][0]
    blank = {n for f, last, _ in futures for n in range(f, last + 1)}
    out = ["; ".join(text for _, _, text in futures)]
    for i, line in enumerate(lines, start=1):
        if i < first:
            out.append(line)
        elif i == first:
            out.append(header)
        elif i in blank:
            out.append("")
        else:
            out.append(line if (i in keep or not line.strip()) else "    " + line)
    return "\n".join(out) + "\n"


def _continuation_lines(body: str) -> set[int]:
    """1-based line numbers that start inside a multi-line string token."""
    lines: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(body).readline):
            if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                lines.update(range(tok.start[0] + 1, tok.end[0] + 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # compile() below reports the real error
    return lines


def _indent(body: str) -> str:
    keep = _continuation_lines(body)
    # Split on "\n" only: str.splitlines also breaks at \x1c-\x1e, \x85, \u2028..., which
    # Python does not treat as line ends, and would indent the inside of a string literal.
    lines = body.split("\n")
    if lines[-1] == "":
        lines.pop()
    out = [
        line if (i in keep or not line.strip()) else "    " + line
        for i, line in enumerate(lines, start=1)
    ]
    return "\n".join(out) + "\n"


def _syntax_message(exc: SyntaxError, body: str) -> str:
    # Line N of the generated function is line N of the cell as JupyterLab numbers it: the
    # `def` stands where the magic line is (line 1), and the body keeps its lines.
    cell_line = exc.lineno or 1
    lines = body.split("\n")
    text = lines[cell_line - 2] if 1 < cell_line <= len(lines) + 1 else ""
    where = f"line {cell_line}" if cell_line >= 2 else "the cell"
    caret = ""
    if text and exc.offset:
        col = max(exc.offset - 1 - (4 if text.strip() else 0), 0)
        caret = "\n    " + text + "\n    " + " " * min(col, len(text)) + "^"
    return (
        f"Syntax error in the training cell at {where}: {exc.msg}. Nothing was submitted; fix "
        f"the cell and run it again.{caret}"
    )


#: The cell magics whose body becomes a job (the size check runs before IPython parses them).
TRAINING_MAGICS = ("torchtrain", "mpitrain", "jaxtrain", "xgboosttrain", "transformerstrain")
PLUGIN_TRAINING_MAGICS: set[str] = (
    set()
)  # cell magics installed plugins registered (kf_jupyter.plugins)


def oversize_message(size: int) -> str:
    """The error for a training cell of `size` bytes, over what a job's command can hold."""
    return (
        f"The training cell is {size:,} bytes; a job's command holds at most "
        f"{MAX_SCRIPT_BYTES:,} bytes (one process argument), the cell included. Nothing was "
        "submitted. Keep data out of the cell: read it from a file or a volume in the job, or "
        "move large code into a module."
    )


def oversized_training_cell(lines: list[str]) -> int | None:
    """The size in bytes of a training cell too large to submit, else None (cheap: no parsing).

    Given the cell as IPython's input transformers see it (a list of lines), before any of them
    runs: IPython's own clean-up passes take seconds on a 10 MB cell.
    """
    first = next((ln for ln in lines if ln.strip()), "")
    word = first.strip().split(maxsplit=1)[0] if first.strip() else ""
    if not word.startswith("%%") or (
        word[2:] not in TRAINING_MAGICS and word[2:] not in PLUGIN_TRAINING_MAGICS
    ):
        return None
    chars = sum(len(ln) for ln in lines)
    if chars <= MAX_SCRIPT_BYTES // 4:  # 4 bytes per character at most in UTF-8
        return None
    size = sum(len(ln.encode("utf-8", "surrogatepass")) for ln in lines)
    return size if size > MAX_SCRIPT_BYTES else None


def check_cell_text(body: str) -> None:
    """Refuse a cell too large for a job's command, or holding text that is not UTF-8.

    The size is checked first (in O(1) for the length, then one encode), so a huge cell is
    refused at once instead of after minutes of tokenizing.
    """
    if (
        len(body) > MAX_SCRIPT_BYTES
        or len(body.encode("utf-8", "surrogatepass")) > MAX_SCRIPT_BYTES
    ):
        raise ValidationError(oversize_message(len(body.encode("utf-8", "surrogatepass"))))
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        before = body[: exc.start]
        line = before.count("\n") + 2  # the %%torchtrain line is line 1
        col = exc.start - (before.rfind("\n") + 1) + 1
        code = f"U+{ord(body[exc.start]):04X}"
        raise ValidationError(
            f"The training cell holds a lone surrogate character ({code}) on line {line}, "
            f"column {col} (the magic line is line 1): that is not text any file or process "
            "can carry (it cannot be encoded as UTF-8), so nothing was submitted. It usually "
            "comes from pasted or badly decoded text; delete it, or write it as an escape "
            f"inside a string literal ('\\u{ord(body[exc.start]):04x}')."
        ) from None


def build_cell_function(
    body: str, args: tuple[str, ...] = (), name: str = FUNC_NAME
) -> CellFunction:
    """The source of `def name(args): <body>`, checked for syntax and free names."""
    check_cell_text(body)  # before any parsing: cheap, and parsing 10 MB takes minutes
    body = textwrap.dedent(body.replace("\r\n", "\n"))
    if not body.strip():
        raise ValidationError(
            "The training cell is empty: write the training code below the %%torchtrain line "
            "(or %%mpitrain, %%jaxtrain, %%xgboosttrain)."
        )
    for a in args:
        if not a.isidentifier():
            raise ValidationError(
                f"--args {a!r} is not a Python variable name; give names separated by commas, "
                "for example --args lr,epochs."
            )
    try:
        tree: ast.Module | None = ast.parse(body)
    except SyntaxError:
        tree = None  # compile() below reports it
    header = f"def {name}({', '.join(args)}):"
    futures = _future_imports(tree) if tree is not None else []
    source = _hoisted(body, header, futures) if futures else header + "\n" + _indent(body)
    if tree is not None and not _returns_at_top(tree):
        return _cell_script(body, source, name, tuple(args))
    try:
        compile(source, "<training cell>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise CellSyntaxError(_syntax_message(exc, body)) from None
    return CellFunction(source, name, tuple(args), tuple(free_names(source, name)))


def _cell_script(body: str, source: str, name: str, args: tuple[str, ...]) -> CellFunction:
    """A cell without a top-level return: the script (one leading line for the magic line)."""
    script = "\n" + body
    try:
        compile(script, "<training cell>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        if exc.offset:  # _syntax_message allows for the function form's 4-space indent
            exc.offset += 4
        raise CellSyntaxError(_syntax_message(exc, body)) from None
    try:
        names = tuple(free_names(source, name))
    except SyntaxError:  # legal only at module level (`import *`): no free-name hints
        names = ()
    return CellFunction(source, name, args, names, script_source=script)


def free_names(source: str, func_name: str = FUNC_NAME) -> list[str]:
    """Names the function reads that nothing in its source defines and builtins lack.

    A name read as a global anywhere in the function (nested functions, classes and
    comprehensions included) is free unless some scope of the cell assigns it under a `global`
    declaration, or it is a builtin or a module dunder the job's runner has.
    """
    top = symtable.symtable(source, "<training cell>", "exec")
    func = next(t for t in top.get_children() if t.get_name() == func_name)
    used: set[str] = set()
    defined: set[str] = set()
    stack = [func]
    while stack:
        table = stack.pop()
        stack.extend(table.get_children())
        for sym in table.get_symbols():
            if not sym.is_global():
                continue
            if sym.is_declared_global() and (sym.is_assigned() or sym.is_imported()):
                defined.add(sym.get_name())
            if sym.is_referenced():
                used.add(sym.get_name())
    allowed = remote_builtins() | MODULE_DUNDERS | {func_name}
    return sorted(used - defined - allowed)
