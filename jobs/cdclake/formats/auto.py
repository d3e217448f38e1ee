"""``auto``: a topic whose records are read in whichever known format each one is in.

``format: auto`` in a source of the pipeline YAML reads each Kafka record with the parser of the
format :func:`cdclake.formats.detect.detect` finds in it (one parser per format, built with the
source's options). A record of one format gets exactly that format's result or error; a record
that matches no format, or several, is a :class:`ParseError` of format ``auto``, field ``value``
(quarantined, with what was seen); an empty value (a Kafka tombstone) carries no format: it is a
``tombstone`` control record of format ``auto`` whose detail is the Kafka key as text (as the
Kafka Connect formats give it; a key in Confluent's wire format is not decoded, as the value names
no format). The bronze rows name the detected format
(``source_format``); a quarantined record's ``source_format`` is ``auto`` and its reason names the
format whose parser refused it.

Schema-aware formats (Qlik Replicate: data messages decoded with the metadata messages seen
earlier, kept in ``bronze.schema_registry``) work under ``auto`` too: :class:`AutoParser` is a
:class:`cdclake.record.SchemaAwareParser` whose :meth:`AutoParser.schema_entries` are the Qlik
parser's for Qlik records and whose :attr:`AutoParser.schema_formats` name the formats whose
stored entries it takes (:func:`cdclake.normalize.registry.register_schemas`).

Options: the source's options, handed to every format's parser (each reads those it knows).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from cdclake.formats.detect import FORMAT, detect
from cdclake.formats.fields import key_detail
from cdclake.formats.registry import all_formats
from cdclake.record import ControlRecord, KafkaRecord, ParseError, ParseResult, SchemaAwareParser, SchemaEntry


class AutoParser(SchemaAwareParser):
    """Parser of ``auto`` sources: ``AutoParser(options).parse(rec)`` (see the module docstring).

    ``options``: the source's options, handed to each format's parser when its first record comes
    (a format that refuses them quarantines its records; see :meth:`parser`).
    :meth:`parse` gives the detected format's result or raises its :class:`ParseError`, or a
    ``ParseError("auto", ..., "value")`` when detection fails. :meth:`fast_parse` hands each
    detected format's records to that format's fast path.
    """

    format_name = FORMAT
    FAST_PATH = True

    def __init__(self, options: Optional[Mapping[str, Any]] = None, entries: Sequence[SchemaEntry] = ()):
        self._options = dict(options or {})
        self._classes = {f.name: f.parser for f in all_formats()}
        #: The parsers made so far, per format: each is made when a record of its format first comes.
        self.parsers: dict[str, Any] = {}
        #: The formats whose stored schema entries this parser takes (:meth:`with_schemas`).
        self.schema_formats = tuple(sorted(n for n, c in self._classes.items() if issubclass(c, SchemaAwareParser)))
        self._entries = list(entries)

    def parser(self, name: str):
        """The parser of format ``name`` with the source's options (a schema-aware one holding its
        entries), made on first use. Raises :class:`ParseError` (field ``value``) when that format
        refuses the source's options (e.g. ``debezium-avro`` without ``schema_registry``): the
        record is quarantined, the other formats' records are read."""
        parser = self.parsers.get(name)
        if parser is None:
            try:
                parser = self._classes[name](dict(self._options))
            except ValueError as exc:
                raise ParseError(FORMAT, f"a {name} record, and the source's options do not fit {name}: {exc}",
                                 "value") from None
            if isinstance(parser, SchemaAwareParser):
                parser = parser.with_schemas([e for e in self._entries if e.source_format == name])
            self.parsers[name] = parser
        return parser

    def parser_for(self, record: KafkaRecord):
        """The parser of the format detected in ``record`` (non-empty value); raises the
        detection's :class:`ParseError`, or :meth:`parser`'s."""
        return self.parser(detect(record.value))

    def parse(self, record: KafkaRecord) -> ParseResult:
        """The detected format's result for ``record`` (see the class docstring)."""
        if not record.value:
            return ControlRecord("tombstone", FORMAT, detail=key_detail(record.key))
        return self.parser_for(record).parse(record)

    def fast_parse(self, records: list[KafkaRecord]) -> list[Optional[list[tuple]]]:
        """Records grouped by detected format, each group read by its format's fast path (when
        it has one); None for a record whose detection fails, an empty value, or one its
        format's fast path leaves to :meth:`parse`."""
        out: list[Optional[list[tuple]]] = [None] * len(records)
        groups: dict[str, list[int]] = {}
        for i, rec in enumerate(records):
            if not rec.value:
                continue
            try:
                groups.setdefault(detect(rec.value), []).append(i)
            except ParseError:
                continue
        for name, idx in groups.items():
            try:
                parser = self.parser(name)
            except ParseError:
                continue
            if not getattr(parser, "FAST_PATH", False):
                continue
            for i, result in zip(idx, parser.fast_parse([records[i] for i in idx])):
                out[i] = result
        return out

    def schema_entries(self, record: KafkaRecord) -> list[SchemaEntry]:
        """The schema-aware format's entries in ``record`` (Qlik metadata messages); ``[]`` for
        anything else, records whose detection fails included. Never raises."""
        if not record.value:
            return []
        try:
            parser = self.parser_for(record)
        except ParseError:
            return []
        return parser.schema_entries(record) if isinstance(parser, SchemaAwareParser) else []

    def may_hold_schema(self, value: Optional[bytes]) -> bool:
        """True when any schema-aware format's :meth:`~cdclake.record.SchemaAwareParser.may_hold_schema` is."""
        return any(self._classes[n].may_hold_schema(value) for n in self.schema_formats)

    def with_schemas(self, entries: Sequence[SchemaEntry]) -> "AutoParser":
        """A parser with these options whose schema-aware formats hold ``entries`` (each format
        the entries of its own ``source_format``), added to those this one holds."""
        return AutoParser(self._options, self._entries + list(entries))
