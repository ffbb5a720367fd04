"""Syntax errors of a model's SQL in SQL's own terms: what is wrong, where (offset, so line and column), and an
excerpt with a caret.

sqlglot reports its parser's internals ("Required keyword: 'this' missing for <class '...Where'>", "Expecting )",
"Expected table name but got <Token ...>"), and it accepts some SQL that Spark does not mean as written
(``SELECT a,, b``, a trailing ``,`` before ``FROM``, ``SELECT FROM t``, an empty ``GROUP BY`` or ``ON``): Spark
would reject the last ones or, worse, read ``FROM`` as a column name. `parse_statements` parses with sqlglot,
looks for those mistakes in the tokens, translates sqlglot's descriptions into plain words and returns the first
problem in the text, or None and the parsed statements.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError, TokenError
from sqlglot.parser import Parser
from sqlglot.tokens import Token, TokenType

__all__ = ["SyntaxProblem", "parse_statements"]

#: A clause keyword that cannot start an expression: a list or a clause that reaches one is missing something.
_CLAUSES = {
    TokenType.FROM,
    TokenType.WHERE,
    TokenType.GROUP_BY,
    TokenType.HAVING,
    TokenType.QUALIFY,
    TokenType.WINDOW,
    TokenType.ORDER_BY,
    TokenType.CLUSTER_BY,
    TokenType.DISTRIBUTE_BY,
    TokenType.SORT_BY,
    TokenType.LIMIT,
    TokenType.UNION,
    TokenType.EXCEPT,
    TokenType.INTERSECT,
    TokenType.JOIN,
    TokenType.ON,
}
_ENDS = _CLAUSES | {TokenType.R_PAREN, TokenType.SEMICOLON, TokenType.COMMA}

#: A keyword that needs something after it, and what is missing when nothing comes.
_NEEDS = {
    TokenType.SELECT: "the SELECT lists no columns",
    TokenType.WHERE: "the WHERE clause has no condition",
    TokenType.HAVING: "the HAVING clause has no condition",
    TokenType.QUALIFY: "the QUALIFY clause has no condition",
    TokenType.ON: "the JOIN's ON has no condition",
    TokenType.GROUP_BY: "GROUP BY has no expressions",
    TokenType.ORDER_BY: "ORDER BY has no expressions",
    TokenType.PARTITION_BY: "PARTITION BY has no expressions",
    TokenType.CLUSTER_BY: "CLUSTER BY has no expressions",
    TokenType.DISTRIBUTE_BY: "DISTRIBUTE BY has no expressions",
    TokenType.SORT_BY: "SORT BY has no expressions",
    TokenType.LIMIT: "LIMIT has no row count",
    TokenType.ALIAS: "AS has no name after it",
}

#: sqlglot's expression classes (from "Required keyword: ... missing for <class ...>") in SQL's terms: what is
#: missing, and what to do.
_MISSING = {
    "Where": ("the WHERE clause has no condition", "complete or remove WHERE"),
    "Having": ("the HAVING clause has no condition", "complete or remove HAVING"),
    "Qualify": ("the QUALIFY clause has no condition", "complete or remove QUALIFY"),
    "Order": ("ORDER BY has no expressions", "complete or remove ORDER BY"),
    "Group": ("GROUP BY has no expressions", "complete or remove GROUP BY"),
    "Limit": ("LIMIT has no row count", "complete or remove LIMIT"),
    "Offset": ("OFFSET has no row count", "complete or remove OFFSET"),
    "Join": ("the JOIN has no table", "name the table to join"),
    "From": ("FROM has no table", "name the table after FROM"),
    "Not": ("NOT has no condition after it", "complete or remove NOT"),
    "Neg": ("'-' has no operand after it", "complete or remove the '-'"),
    "And": ("AND has no condition after it", "complete or remove AND"),
    "Or": ("OR has no condition after it", "complete or remove OR"),
    "Xor": ("XOR has no condition after it", "complete or remove XOR"),
    "In": ("IN has no values", "write IN (a, b, ...)"),
    "Alias": ("AS has no name after it", "write the name after AS"),
    "Cast": ("CAST needs a value and a type", "write CAST(value AS type)"),
    "TryCast": ("TRY_CAST needs a value and a type", "write TRY_CAST(value AS type)"),
    "Case": ("CASE has no WHEN ... THEN", "write CASE WHEN condition THEN value ... END"),
    "Paren": ("the parentheses hold nothing", "write an expression inside them, or remove them"),
}
#: sqlglot's "Expected ... after ..." descriptions in SQL's terms.
_EXPECTED = {
    "Expected TYPE after CAST": ("CAST has no type after AS", "write CAST(value AS type)"),
    "Expected END after CASE": ("CASE has no END", "end it with END"),
}
_OPERATORS = {
    "Add": "+",
    "Sub": "-",
    "Mul": "*",
    "Div": "/",
    "IntDiv": "DIV",
    "Mod": "%",
    "EQ": "=",
    "NEQ": "<>",
    "NullSafeEQ": "<=>",
    "GT": ">",
    "GTE": ">=",
    "LT": "<",
    "LTE": "<=",
    "DPipe": "||",
    "Like": "LIKE",
    "ILike": "ILIKE",
    "RegexpLike": "RLIKE",
    "Is": "IS",
    "BitwiseAnd": "&",
    "BitwiseOr": "|",
    "BitwiseXor": "^",
    "And": "AND",
    "Or": "OR",
    "Xor": "XOR",
}
_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
_EXPECTED_BUT = re.compile(r"Expected (.+?) but got <Token token_type: TokenType\.(\w+), text: (.*?), line: ")
_KEYWORDS = ["SELECT", "FROM", "WHERE", "GROUP", "ORDER", "HAVING", "JOIN", "LIMIT", "UNION", "WITH", "AS", "ON"]


@dataclass(frozen=True)
class SyntaxProblem:
    """What is wrong (``message``, in SQL's terms, with what to do) and where: ``offset`` into the SQL (0-based)
    and ``length`` characters (at least 1) to underline."""

    offset: int
    length: int
    message: str

    def position(self, sql: str) -> tuple[int, int]:
        """(line, column), both 1-based, of ``offset`` in ``sql``."""
        line = sql.count("\n", 0, self.offset) + 1
        return line, self.offset - (sql.rfind("\n", 0, self.offset) + 1) + 1

    def excerpt(self, sql: str, width: int = 100) -> str:
        """The line of ``offset`` and a caret line under the problem (long lines shortened around it)."""
        line, column = self.position(sql)
        text = sql.split("\n")[line - 1].rstrip("\r").replace("\t", " ")  # a tab is one column, as counted
        start, caret = column - 1, max(1, min(self.length, len(text) - column + 1))
        left = max(0, start - width // 2)
        shown = text[left : left + width]
        prefix = "..." if left else ""
        suffix = "..." if left + width < len(text) else ""
        gutter = f"{line:>5} | "
        marks = " " * (len(prefix) + start - left) + "^" * caret
        return f"{gutter}{prefix}{shown}{suffix}\n{' ' * (len(gutter) - 2)}| {marks}"


def parse_statements(sql: str, dialect: str) -> tuple[list[exp.Expr], SyntaxProblem | None]:
    """The statements of ``sql``, or the first syntax problem in it (then no statements)."""
    d = Dialect.get_or_raise(dialect)
    start = len(sql) - len(sql.lstrip())  # where a problem without a place is shown: the query's start
    try:
        tokens = d.tokenize(sql)
    except TokenError:
        return [], _unterminated(sql) or SyntaxProblem(start, 1, "the SQL cannot be read as words and symbols")
    parser = d.parser()
    problems = _mistakes(tokens)  # first, so that at the same place their more specific message wins
    statements: list[exp.Expr] = []
    try:
        statements = [s for s in parser.parse(tokens, sql) if s is not None]
    except ParseError as exc:
        problems.append(_translate(exc, parser, tokens, sql))
    except SqlglotError as exc:  # not expected from parsing; said without sqlglot's internals
        problems.append(SyntaxProblem(start, 1, _plain(str(exc))))
    if problems:
        return [], min(problems, key=lambda p: p.offset)
    return statements, None


def _width(token: Token) -> int:
    return token.end - token.start + 1


def _after(token: Token) -> SyntaxProblem:
    """A problem placed just after ``token`` (where the missing part belongs)."""
    return SyntaxProblem(token.end + 1, 1, "")


def _found(token: Token | None) -> str:
    return "unexpected end of the query" if token is None else f"found '{token.text}'"


def _mistakes(tokens: list[Token]) -> list[SyntaxProblem]:
    """What sqlglot parses but Spark does not mean as written, and parentheses that do not pair up."""
    problems = []
    opened: list[Token] = []
    casts: set[int] = set()  # the '(' of CAST( and TRY_CAST(
    for i, token in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        kind = token.token_type
        if kind == TokenType.L_PAREN:
            opened.append(token)
            if i > 0 and tokens[i - 1].text.upper() in ("CAST", "TRY_CAST"):
                casts.add(id(token))
        elif kind == TokenType.R_PAREN:
            if not opened:
                problems.append(
                    SyntaxProblem(token.start, 1, "')' closes no '(': remove it, or add the '(' it should close")
                )
            else:
                opened.pop()
        if kind == TokenType.COMMA and following is not None and following.token_type == TokenType.COMMA:
            problems.append(
                SyntaxProblem(following.start, 1, "expected an expression after ',' (found ','); remove one of the two")
            )
        elif kind == TokenType.COMMA and (following is None or following.token_type in _ENDS):
            problems.append(
                SyntaxProblem(
                    token.start,
                    1,
                    f"expected an expression after ',' ({_found(following)}); remove the trailing ','",
                )
            )
        if kind not in _NEEDS:
            continue
        after = following
        if kind == TokenType.SELECT and after is not None and after.token_type in (TokenType.DISTINCT, TokenType.ALL):
            after = tokens[i + 2] if i + 2 < len(tokens) else None
        if after is not None and after.token_type not in _ENDS:
            continue
        what = "AS" if kind == TokenType.ALIAS else kind.name.replace("_", " ")
        missing, todo = _NEEDS[kind], f"complete or remove {what}"
        if kind == TokenType.SELECT:
            todo = "list the output columns after SELECT"
        elif kind == TokenType.ALIAS and opened and id(opened[-1]) in casts:
            missing, todo = _EXPECTED["Expected TYPE after CAST"]
        elif kind == TokenType.ALIAS:
            todo = "write the name after AS, or remove AS"
        problems.append(SyntaxProblem(token.start, _width(token), f"{missing} ({_found(after)}); {todo}"))
    for token in opened:
        problems.append(SyntaxProblem(token.start, 1, "this '(' is never closed; add the ')' it needs"))
    return problems


def _translate(error: ParseError, parser: Parser, tokens: list[Token], sql: str) -> SyntaxProblem:
    """sqlglot's first error, in SQL's terms: an incomplete construct at its token, anything else where the parser
    stopped (the token it found, or just after the last one when the query ended too early)."""
    first = error.errors[0] if error.errors else {}
    description = first.get("description") or str(error).splitlines()[0]
    at = _token_at(tokens, first.get("line"), first.get("col"))
    # the token the parser stood on; sqlglot's sentinel (or None) once it ran out of tokens wanting more
    current = getattr(parser, "_curr", None)
    found = None if current is None or current.token_type == TokenType.SENTINEL else current
    where = at or found or (tokens[-1] if tokens else None)
    if where is None:
        return SyntaxProblem(0, 1, _plain(description))
    if found is not None:
        offset, length = found.start, _width(found)
    else:
        offset, length = where.end + 1, 1
    index = next((i for i, t in enumerate(tokens) if t is found), len(tokens))
    before = tokens[index - 1] if index > 0 else None  # the last token before what was found (or the end)
    tail = _found(found)

    if m := _REQUIRED.match(description):
        part, name = m.groups()
        missing, todo = _missing(name, part)
        return SyntaxProblem(where.start, _width(where), f"{missing} ({tail}); {todo}")
    if description in _EXPECTED:
        missing, todo = _EXPECTED[description]
        return SyntaxProblem(offset, length, f"{missing} ({tail}); {todo}")
    if description == "Expecting )":
        opening = _open_paren(tokens, found)
        since = ""
        if opening is not None:
            line, column = SyntaxProblem(opening.start, 1, "").position(sql)
            since = f" to close the '(' at line {line}, column {column}"
        return SyntaxProblem(offset, length, f"expected ')'{since} ({tail}); add the ')'")
    if m := _EXPECTED_BUT.match(description):
        after = f" after '{before.text}'" if before is not None else ""
        return SyntaxProblem(offset, length, f"expected a {m.group(1)}{after} ({tail}); write it there")
    if description.startswith(("Expecting ", "Expected ")):
        what = _plain(description.split(" ", 1)[1])
        return SyntaxProblem(offset, length, f"expected {what} ({tail}); write it there")
    if description.startswith("Invalid expression / Unexpected token"):
        return _unexpected(tokens, found or where, sql)
    return SyntaxProblem(where.start, _width(where), f"{_plain(description)} ({tail}); fix the SQL there")


def _missing(name: str, part: str) -> tuple[str, str]:
    """What is missing of sqlglot's expression ``name`` (its argument ``part`` is), and what to do."""
    if name in _MISSING:
        return _MISSING[name]
    if name == "Between":
        return f"BETWEEN has no {'lower' if part == 'low' else 'upper'} bound", "write BETWEEN low AND high"
    if name in _OPERATORS:
        operator, side = _OPERATORS[name], "left" if part == "this" else "right"
        return f"'{operator}' has no {side}-hand operand", f"write it, or remove the '{operator}'"
    cls = getattr(exp, name, None)
    if isinstance(cls, type) and issubclass(cls, exp.SetOperation):
        return f"{name.upper()} has no query after it", f"write the SELECT it combines with, or remove {name.upper()}"
    if isinstance(cls, type) and issubclass(cls, exp.Func):
        try:
            function = cls.sql_names()[0]
        except (NotImplementedError, IndexError):
            function = cls.key.upper()
        return f"{function}() is missing an argument", "give it its arguments"
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).lower()
    return f"an incomplete {words}: something is missing", "complete it"


def _unexpected(tokens: list[Token], token: Token, sql: str) -> SyntaxProblem:
    """An 'Invalid expression / Unexpected token' at ``token``: what it is likely to be."""
    index = next((i for i, t in enumerate(tokens) if t is token), 0)
    first = tokens[0]
    if first.token_type == TokenType.VAR and index > 0:  # the statement starts with a word that is no keyword
        guess = difflib.get_close_matches(first.text.upper(), ["SELECT", "WITH"], n=1, cutoff=0.6)
        hint = f"did you mean {guess[0]}?" if guess else "a model is one SELECT (or WITH ... SELECT)"
        return SyntaxProblem(
            first.start, _width(first), f"the query starts with '{first.text}', which is not a keyword; {hint}"
        )
    if token.token_type == TokenType.R_PAREN and _open_paren(tokens, token) is None:
        return SyntaxProblem(token.start, 1, "')' closes no '(': remove it, or add the '(' it should close")
    message = f"unexpected '{token.text}'; remove it, or write what is missing before it"
    previous = tokens[index - 1] if index > 0 else None
    if previous is not None and previous.token_type == TokenType.VAR:
        guess = difflib.get_close_matches(previous.text.upper(), _KEYWORDS, n=1, cutoff=0.75)
        if guess and guess[0] != previous.text.upper():
            line, column = SyntaxProblem(previous.start, 1, "").position(sql)
            message = (
                f"unexpected '{token.text}'; is '{previous.text}' (line {line}, column {column}) a misspelled "
                f"{guess[0]}?"
            )
    return SyntaxProblem(token.start, _width(token), message)


def _token_at(tokens: list[Token], line: int | None, col: int | None) -> Token | None:
    """The token sqlglot's error names by its line and (last) column."""
    return next((t for t in tokens if t.line == line and t.col == col), None)


def _open_paren(tokens: list[Token], before: Token | None) -> Token | None:
    """The innermost '(' still open at ``before`` (None: at the end)."""
    opened: list[Token] = []
    for token in tokens:
        if token is before:
            break
        if token.token_type == TokenType.L_PAREN:
            opened.append(token)
        elif token.token_type == TokenType.R_PAREN:
            if not opened:
                return None
            opened.pop()
    return opened[-1] if opened else None


def _unterminated(sql: str) -> SyntaxProblem | None:
    """A string, a backquoted name or a /* comment that is never closed (what the tokenizer failed on)."""
    i, n = 0, len(sql)
    while i < n:
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            continue
        if sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                return SyntaxProblem(i, 2, "this /* comment is never closed; end it with */")
            i = end + 2
            continue
        quote = sql[i]
        if quote in "'\"`":
            j = i + 1
            while j < n:
                if sql[j] == "\\" and quote != "`":  # Spark's escapes in strings
                    j += 2
                elif sql[j] == quote and sql[j + 1 : j + 2] == quote:  # a doubled quote
                    j += 2
                elif sql[j] == quote:
                    break
                else:
                    j += 1
            if j >= n:
                what = "quoted name" if quote == "`" else "string"
                return SyntaxProblem(i, 1, f"this {what} is never closed; end it with {quote}")
            i = j + 1
            continue
        i += 1
    return None


def _plain(text: str) -> str:
    """sqlglot's words without its class and token reprs."""
    text = re.sub(r"<class '[\w.]*?(\w+)'>", r"\1", text)
    text = re.sub(r"<Token token_type: TokenType\.\w+, text: (.*?), line:.*?>", r"'\1'", text)
    return " ".join(text.split())
