"""Built-in vendor formats: importing this package registers every parser.

One module per vendor format; each module's docstring cites the document it implements.
"""
from cdclake.formats import arcion, canal, cdl, debezium, dts, qlik, shareplex  # noqa: F401
