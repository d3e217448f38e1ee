"""One canonical text per value, computed alike by PostgreSQL, MySQL/MariaDB, Spark and Python.

Reconciliation (:mod:`cdclake.reconcile`) hashes rows on both sides; the hashes agree only when
both sides render every value into the same text. Each source column gets a *kind* from its
source data type (``information_schema.columns.data_type``, :func:`kind_of`), and each kind one
canonical text, so that values are compared by value, not by how a database prints them:

=========  ==============================================  ====================================
kind       canonical text                                  source types
=========  ==============================================  ====================================
int        decimal digits, optional ``-``                  smallint, integer, bigint, tinyint,
                                                           mediumint, year
decimal    the value, no exponent, trailing fractional     numeric, decimal (silver: decimal(p,s),
           zeros and a trailing ``.`` removed              or the text of a variable-scale decimal)
           (``1.50`` and ``1.5`` are ``1.5``)
float      rounded to 9 decimals, as decimal (the only     real, double precision, float, double
           kind compared to a tolerance: binary floats
           print differently in every engine; PostgreSQL
           converts a float8 through its 15 significant
           digits, so a value whose 16th and 17th digits
           round differently may show as drift)
bool       ``1`` / ``0``                                   boolean (PostgreSQL)
binary     lower-case hex of the bytes                     bytea, binary, varbinary, *blob
date       ``YYYY-MM-DD``                                  date
timestamp  microseconds since 1970-01-01 UTC               timestamp with time zone (the instant),
                                                           timestamp without time zone, datetime,
                                                           timestamp (MySQL; read in UTC): the
                                                           wall-clock time taken as UTC, as the
                                                           pipeline stores it (:mod:`cdclake.types`)
text       the text itself (UTF-8)                         everything else (char, varchar, text,
                                                           uuid, json, enum ...)
=========  ==============================================  ====================================

A row's text is its columns' pieces joined by ``,``; a piece is ``<characters>:<text>`` (the
length in characters first, so that no text can imitate a separator) or ``-`` for NULL. A key's
*hash* and a row's hash are the first 15 hex digits of the MD5 of the key's and the row's text,
a 60-bit integer; a key's *bucket* at modulus ``m`` is its hash modulo ``m``. PostgreSQL
(``md5``), MariaDB (``MD5``) and Spark (``md5``) all hash the UTF-8 bytes of the text.
"""
from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Optional

KINDS = ("int", "decimal", "float", "bool", "binary", "date", "timestamp", "text")

_PG_KINDS = {"smallint": "int", "integer": "int", "bigint": "int", "numeric": "decimal", "real": "float",
             "double precision": "float", "boolean": "bool", "bytea": "binary", "date": "date",
             "timestamp with time zone": "timestamp", "timestamp without time zone": "timestamp"}
_MY_KINDS = {"tinyint": "int", "smallint": "int", "mediumint": "int", "int": "int", "integer": "int", "bigint": "int",
             "year": "int", "decimal": "decimal", "numeric": "decimal", "float": "float", "double": "float",
             "real": "float", "binary": "binary", "varbinary": "binary", "tinyblob": "binary", "blob": "binary",
             "mediumblob": "binary", "longblob": "binary", "date": "date", "datetime": "timestamp",
             "timestamp": "timestamp"}
#: Hex digits of the MD5 taken as a hash: 15 (60 bits), so that it fits a signed 64-bit integer.
HASH_HEX = 15
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def kind_of(dialect: str, data_type: str) -> str:
    """The kind (:data:`KINDS`) of a source column of ``information_schema`` type ``data_type`` in
    ``dialect`` (``postgres`` or ``mysql``); unknown types are ``text``."""
    table = _PG_KINDS if dialect == "postgres" else _MY_KINDS
    return table.get(data_type.strip().lower(), "text")


def pg_ident(name: str) -> str:
    """``name`` as a PostgreSQL quoted identifier."""
    return '"' + name.replace('"', '""') + '"'


def my_ident(name: str) -> str:
    """``name`` as a MySQL/MariaDB quoted identifier."""
    return "`" + name.replace("`", "``") + "`"


# --- SQL of the source databases ----------------------------------------------------------------

def _my_trim(text: str) -> str:
    return f"IF(LOCATE('.', {text}) > 0, TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM {text})), {text})"


#: Each kind's canonical text (module docstring) in each dialect's SQL, side by side; ``{c}`` is
#: the quoted column. A kind not listed is ``text``.
SQL_VALUE: dict[str, dict[str, str]] = {
    "postgres": {
        "int": "{c}::text",
        "decimal": "trim_scale({c})::text",
        "float": "trim_scale(round({c}::numeric, 9))::text",
        "bool": "CASE WHEN {c} THEN '1' WHEN NOT {c} THEN '0' END",
        "binary": "encode({c}, 'hex')",
        "date": "to_char({c}, 'YYYY-MM-DD')",
        "timestamp": "(extract(epoch FROM {c}) * 1000000)::bigint::text",
        "text": "{c}::text",
    },
    "mysql": {
        "int": "CAST({c} AS CHAR)",
        "decimal": _my_trim("CAST({c} AS CHAR)"),
        "float": _my_trim("CAST(CAST({c} AS DECIMAL(65,9)) AS CHAR)"),
        "bool": "CASE WHEN {c} THEN '1' WHEN NOT {c} THEN '0' END",
        "binary": "LOWER(HEX({c}))",
        "date": "DATE_FORMAT({c}, '%Y-%m-%d')",
        "timestamp": "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {c}) AS CHAR)",
        "text": "CAST({c} AS CHAR)",
    },
}
#: Per dialect: a column's piece of the row text (``{v}`` its value text, NULL for NULL), and how
#: the pieces (``{pieces}``, comma-separated SQL expressions) are joined with ``,``.
_SQL_PIECE = {"postgres": ("coalesce(char_length({v})::text || ':' || {v}, '-')", "{pieces}", " || ',' || "),
              "mysql": ("COALESCE(CONCAT(CHAR_LENGTH({v}), ':', {v}), '-')", "CONCAT_WS(',', {pieces})", ", ")}


def sql_value(dialect: str, col: str, kind: str) -> str:
    """The SQL expression of column ``col``'s canonical text (NULL for NULL) in ``dialect``
    (``postgres`` or ``mysql``), from :data:`SQL_VALUE`."""
    forms = SQL_VALUE["postgres" if dialect == "postgres" else "mysql"]
    ident = pg_ident if dialect == "postgres" else my_ident
    return forms.get(kind, forms["text"]).format(c=ident(col))


def sql_text(dialect: str, columns: list[tuple[str, str]]) -> str:
    """The SQL expression of the canonical text of ``columns`` (``(name, kind)`` pairs)."""
    piece, joined, sep = _SQL_PIECE["postgres" if dialect == "postgres" else "mysql"]
    pieces = [piece.format(v=sql_value(dialect, col, kind)) for col, kind in columns]
    return joined.format(pieces=sep.join(pieces))


def sql_hash(dialect: str, text: str) -> str:
    """The SQL expression of the 60-bit hash of the text expression ``text`` (a bigint)."""
    if dialect == "postgres":
        return f"('x' || substr(md5({text}), 1, {HASH_HEX}))::bit({HASH_HEX * 4})::bigint"
    return f"CAST(CONV(SUBSTR(MD5({text}), 1, {HASH_HEX}), 16, 10) AS UNSIGNED)"


# --- Spark over silver ----------------------------------------------------------------------------

def _spark_trim(text):
    from pyspark.sql import functions as F

    trimmed = F.regexp_replace(F.regexp_replace(text, r"0+$", ""), r"\.$", "")
    return F.when(text.contains("."), trimmed).otherwise(text)


def _spark_plain(c, scale: int):
    """The plain text (no exponent) of decimal column ``c`` of scale ``scale``: Spark writes a
    decimal below 10^-6 as ``1.000000000E-9``; its unscaled integer (then exact: below
    10^(scale-6)) gets the decimal point put back."""
    from pyspark.sql import functions as F

    text = c.cast("string")
    if scale == 0:
        return text
    unscaled = F.abs(c * F.lit(10 ** scale).cast(f"decimal({scale + 1},0)")).cast("decimal(38,0)").cast("string")
    plain = F.concat(F.when(c < 0, F.lit("-")).otherwise(F.lit("")),
                     F.regexp_replace(F.lpad(unscaled, scale + 1, "0"), f"^(.*)(.{{{scale}}})$", "$1.$2"))
    return F.when(text.contains("E"), plain).otherwise(text)


def spark_value(col: Optional[str], kind: str, spark_type: Optional[str]):
    """The Spark column of silver column ``col``'s canonical text for source kind ``kind``;
    ``spark_type`` is the silver column's ``simpleString()`` type (None, like ``col`` None: the
    silver table lacks the column, read as NULL)."""
    from pyspark.sql import functions as F

    if col is None:
        return F.lit(None).cast("string")
    c = F.col(f"`{col.replace('`', '``')}`")
    st = spark_type or "string"
    if kind == "int":
        return c.cast("int").cast("string") if st == "boolean" else c.cast("string")
    if kind == "decimal":
        if st.startswith("decimal"):
            return _spark_trim(_spark_plain(c, int(st.rstrip(")").split(",")[1])))
        if st == "string":
            return _spark_trim(c)
        return _spark_trim(_spark_plain(c.cast("decimal(38,9)"), 9))
    if kind == "float":
        return _spark_trim(_spark_plain(c.cast("decimal(38,9)"), 9))
    if kind == "bool":
        return c.cast("int").cast("string")
    if kind == "binary":
        return F.lower(F.hex(c)) if st == "binary" else c.cast("string")
    if kind == "date":
        return F.date_format(c, "yyyy-MM-dd")
    if kind == "timestamp":
        return F.unix_micros(c.cast("timestamp")).cast("string")
    return c.cast("string")


def spark_text(columns: list[tuple[Optional[str], str, Optional[str]]]):
    """The Spark column of the canonical text of ``columns`` (``(silver column, kind, silver
    type)`` triples, as :func:`spark_value` takes them)."""
    from pyspark.sql import functions as F

    pieces = []
    for col, kind, st in columns:
        v = spark_value(col, kind, st)
        pieces.append(F.coalesce(F.concat(F.length(v).cast("string"), F.lit(":"), v), F.lit("-")))
    return F.concat_ws(",", *pieces)


def spark_hash(text):
    """The Spark column of the 60-bit hash of the text column ``text`` (bigint)."""
    from pyspark.sql import functions as F

    return F.conv(F.substring(F.md5(text), 1, HASH_HEX), 16, 10).cast("bigint")


# --- Python, for the keys in bronze images ---------------------------------------------------------

def _trim(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


def image_value(text: Optional[str], kind: str) -> Optional[str]:
    """The canonical text of a value in a bronze image's canonical text form (:mod:`cdclake.types`:
    Base64 for binary, ``YYYY-MM-DD HH:MM:SS[.ffffff]`` UTC for timestamps) for kind ``kind``.
    Raises ``ValueError`` for a text that is not of the kind."""
    if text is None:
        return None
    if kind == "int":
        return str(int(text))
    if kind in ("decimal", "float"):
        d = Decimal(text)
        if kind == "float":
            d = round(d, 9)
        return _trim(format(d, "f"))
    if kind == "bool":
        return "1" if text.strip().lower() in ("true", "1", "t") else "0"
    if kind == "binary":
        return base64.b64decode(text).hex()
    if kind == "date":
        return dt.date.fromisoformat(text[:10]).isoformat()
    if kind == "timestamp":
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        t = t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
        delta = t - _EPOCH
        return str((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)
    return text


def python_text(values: list[Optional[str]]) -> str:
    """The canonical text of a row or key whose columns' canonical texts are ``values``."""
    return ",".join("-" if v is None else f"{len(v)}:{v}" for v in values)
