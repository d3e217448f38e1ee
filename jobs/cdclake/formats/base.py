"""The parser template: one parse skeleton for every vendor format, vendors fill in its steps.

Modelled on Apache Paimon's CDC formats (``org.apache.paimon.flink.action.cdc.format``:
``AbstractRecordParser`` runs one skeleton and each vendor fills in ``getTableName``,
``extractPrimaryKeys``, ``isDDL`` and its field parser). :meth:`FormatParser.parse` turns one
:class:`cdclake.record.KafkaRecord` into a list of :class:`cdclake.record.ChangeRecord`, one
:class:`cdclake.record.ControlRecord`, or a :class:`cdclake.record.ParseError`:

====  ========================  ==================================================================
step  hook                      what the format does there
====  ========================  ==================================================================
1     :meth:`is_tombstone`,     empty value (Kafka tombstone) → ``tombstone`` control record
      :meth:`tombstone`
2     :meth:`decode`            bytes → an :class:`Event` holding the decoded message (None: a
                                tombstone after all, e.g. a Kafka Connect ``null`` payload)
3     :meth:`control`           a control record (DDL, heartbeat, transaction marker ...) ends the
                                parse here; else set ``event.op``, the canonical operation
4     :attr:`STEPS`, in order:  the row steps, each filling fields of the event:
      :meth:`table`             ``database``, ``schema_name``, ``table``
      :meth:`column_types`      ``types`` (column → canonical type) and ``convert`` (column,
                                value → canonical text), usually a plan kept per table
      :meth:`images`            ``before``, ``after`` (canonical text per column)
      :meth:`primary_key`       ``primary_key``: configured, else ``carried_key`` (the key the
                                message carries), else the Kafka key's columns
      :meth:`position`          ``position``, ``ts_ms``, ``tx_id``, ``tx_seq`` ...
5     :meth:`build`             the canonical change(s)
====  ========================  ==================================================================

Which error a record with several faults reports is the first step that meets one: a format
whose document orders its checks otherwise (Canal reads ``es``/``id`` with the table, Qlik reads
the headers first) declares its own :attr:`STEPS`. What a parser learns from a topic (the table
plans of :meth:`kept`, a format's readers) is dropped when it is pickled to a Spark task
(:meth:`_forget`); each copy learns again, with the same results.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional

from cdclake.formats.columnar import JSON, change_row
from cdclake.formats.options import SourceOptions
from cdclake.names import check_names
from cdclake.formats.text import coerce_text
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseResult
from cdclake.types import to_text

if TYPE_CHECKING:
    from cdclake.formats.probe import Probe


def learnt_dict(parser: Any) -> dict:
    """A new empty dict: the factory of a mapping a parser learns (:attr:`FormatParser.LEARNT`)."""
    return {}


class Event:
    """One Kafka record on its way through :meth:`FormatParser.parse`: what the steps read.

    ``record`` (the Kafka record), ``message`` (the decoded value: a JSON object, an Avro record),
    and per format ``schema`` (e.g. the Kafka Connect value schema), ``envelope`` (an id of that
    schema, for plans kept per schema) and ``source`` (a block of the message the steps share:
    Debezium's ``source``, SharePlex's ``meta``); the steps fill in the rest, which
    :meth:`FormatParser.build` turns into a :class:`ChangeRecord` (fields of the same names:
    ``schema_name`` is ``source_schema``, ``types`` is ``column_types``, ``position`` is
    ``source_position``, ``ts_ms`` is ``source_ts_ms``).
    """

    op: Optional[str] = None
    variant: Any = None
    database: Optional[str] = None
    schema_name: Optional[str] = None
    table: Optional[str] = None
    plan: Any = None
    types: Optional[dict] = None
    convert: Optional[Callable[[str, Any], Any]] = None
    key: Any = None
    carried_key: Optional[list] = None
    before: Optional[dict] = None
    after: Optional[dict] = None
    primary_key: Optional[list] = None
    rows: Optional[list] = None
    position: tuple = ()
    ts_ms: Optional[int] = None
    tx_id: Optional[str] = None
    tx_seq: Optional[int] = None
    tx_last: Optional[bool] = None
    tx_size: Optional[int] = None

    def __init__(self, record: KafkaRecord, message: Any, schema: Any = None, envelope: Any = None,
                 source: Any = None):
        self.record = record
        self.message = message
        self.schema = schema
        self.envelope = envelope
        self.source = source


class FormatParser:
    """Base of every format's parser: ``Parser(options).parse(KafkaRecord)`` (see the module docstring).

    ``options`` is the source's mapping from the pipeline YAML, read into :class:`SourceOptions`
    (``primary_key``, ``primary_keys``, ``column_types``; ``ValueError`` when malformed).
    Subclasses set ``format_name`` and fill in the hooks; a hook not filled in raises
    ``NotImplementedError``. Parsers are picklable (they run inside Spark tasks).
    """

    format_name: str
    #: The row steps, in the order they run (method names).
    STEPS: tuple[str, ...] = ("table", "column_types", "images", "primary_key", "position")
    #: Table plans kept per parser; past that, plans are made per record.
    MAX_PLANS = 4096

    def __init__(self, options: Optional[Mapping[str, Any]] = None):
        self.options = SourceOptions(options or {})
        self._forget()

    # -- what a parser learns: dropped when pickled ----------------------------------------------

    #: What a parser learns from a topic, made anew by :meth:`_forget` and left out of the pickled
    #: state: attribute → factory (called with the parser). A subclass declares only its own
    #: (``LEARNT = {"_fast_keys": learnt_dict}``); those of its bases are kept.
    LEARNT: Mapping[str, Callable[[Any], Any]] = {
        "_plans": learnt_dict,
        "_steps": lambda parser: tuple(getattr(parser, name) for name in parser.STEPS),
    }

    @classmethod
    def learnt(cls) -> dict[str, Callable[[Any], Any]]:
        """Every learnt attribute of the class and its bases (:attr:`LEARNT`), bases first."""
        merged: dict[str, Callable[[Any], Any]] = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("LEARNT", {}))
        return merged

    def _forget(self) -> None:
        """Make the parser's learnt state anew (:attr:`LEARNT`): the kept plans, the bound row
        steps, and what the format's readers and fast path learn."""
        for name, make in self.learnt().items():
            setattr(self, name, make(self))

    def __getstate__(self) -> dict:
        learnt = self.learnt()
        return {k: v for k, v in self.__dict__.items() if k not in learnt}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._forget()

    def kept(self, key: Any, make: Callable[..., Any], *args: Any) -> Any:
        """The plan kept under ``key``, made by ``make(*args)`` on first use (``key`` None, or not
        hashable: made every time, not kept)."""
        if key is None:
            return make(*args)
        try:
            plan = self._plans.get(key)
        except TypeError:
            return make(*args)
        if plan is None:
            plan = make(*args)
            if len(self._plans) < self.MAX_PLANS:
                self._plans[key] = plan
        return plan

    # -- the skeleton ---------------------------------------------------------------------------

    def parse(self, record: KafkaRecord) -> ParseResult:
        """Parse one Kafka record: a list of :class:`ChangeRecord`, or a :class:`ControlRecord`.

        Raises :class:`cdclake.record.ParseError` naming the format and the field for bad input
        (see each format's class docstring for its results and errors).
        """
        if self.is_tombstone(record.value):
            return self.tombstone(record)
        event = self.decode(record)
        if event is None:
            return self.tombstone(record)
        result = self.control(event)
        if result is not None:
            return result
        return self.changes(event)

    def changes(self, event: Event) -> list[ChangeRecord]:
        """The row steps (:attr:`STEPS`) on ``event``, then :meth:`build`."""
        for step in self._steps:
            step(event)
        return self.build(event)

    # -- the fast path: the template's second driver ---------------------------------------------

    #: Whether :meth:`fast_parse` reads batches: set for a class whose :meth:`fast_members` is its
    #: own (a class may set it itself, e.g. a parser that hands batches to others).
    FAST_PATH = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "FAST_PATH" not in cls.__dict__:
            cls.FAST_PATH = cls.fast_members is not FormatParser.fast_members

    def fast_parse(self, records: list[KafkaRecord]) -> list[Optional[list[tuple]]]:
        """The columnar fast path (:mod:`cdclake.formats.columnar`), one driver for every format:
        for each record of the batch, its changes as change rows when the fast path reads it
        exactly, or None when :meth:`parse` must read it (the reference: its result, control
        record or error). For a record it reads, ``fast_parse`` gives what ``parse`` gives,
        change for change. Never raises for a record.

        The driver: (1) :meth:`fast_members` decodes each record and checks its shape, giving
        the record's table plan key and its member (index in ``records`` first); (2) the members
        are grouped by plan key in batch order; (3) :meth:`fast_group` converts each group's
        images column by column (:func:`~cdclake.formats.columnar.convert_images`) and builds
        its rows with the key and position functions :meth:`parse` calls. A group whose
        :meth:`fast_group` raises, and a record whose plan key is not hashable, are left to
        :meth:`parse`. Without a fast path (no :meth:`fast_members`) every entry is None."""
        out: list[Optional[list[tuple]]] = [None] * len(records)
        groups: dict[Any, list] = {}
        get = groups.get
        for key, member in self.fast_members(records):
            try:
                members = get(key)
            except TypeError:  # a plan key that is not hashable: the per-record parser reads it
                continue
            if members is None:
                groups[key] = [member]
            else:
                members.append(member)
        fast_group = self.fast_group
        for key, members in groups.items():
            try:
                fast_group(records, key, members, out)
            except Exception:  # noqa: BLE001  (the per-record parser reads the group's records)
                for member in members:
                    out[member[0]] = None
        return out

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The fast path's first hook: ``(plan key, member)`` for each record of ``records`` the
        fast path may read, in batch order; ``member`` is a tuple whose first item is the
        record's index in ``records``, the rest what :meth:`fast_group` needs (the decoded
        message, its operation ...). A record not given is left to :meth:`parse`. Never raises
        for a record. Default: none (the format has no fast path)."""
        return iter(())

    def fast_group(self, records: list[KafkaRecord], key: Any, members: list[tuple], out: list) -> None:
        """The fast path's second hook: the change rows of one plan's ``members`` (as
        :meth:`fast_members` gave them, in batch order) into ``out`` at each member's index; a
        member left None is read by :meth:`parse`. May raise (every member of the group is then
        left to :meth:`parse`). Default: each member ``(index, Event)`` read by the row steps
        (:meth:`changes`) and accepted by :meth:`fast_check`, for a format whose fast path is the
        per-record template over a faster decoder."""
        for member in members:
            i, event = member[0], member[1]
            try:
                changes = self.changes(event)
                for change in changes:
                    self.fast_check(change)
                out[i] = [change_row(c) for c in changes]
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                out[i] = None

    def json_event_members(self, records: list[KafkaRecord], event_of: Callable[[KafkaRecord, dict], Optional[Event]]
                           ) -> Iterator[tuple[None, tuple]]:
        """Members for the default :meth:`fast_group` (one plan key, None): ``(index, Event)`` of
        each record whose value (bytes) :data:`~cdclake.formats.columnar.JSON` decodes to an
        object, ``event_of(record, message)`` makes an :class:`Event` of (None: leave it) and
        :meth:`control` reads as a row change (it sets ``event.op``). A record any of them raises
        for is left to :meth:`parse`."""
        decode = JSON.decode
        for i, rec in enumerate(records):
            raw = rec.value
            if not raw or type(raw) is not bytes:
                continue
            try:
                msg = decode(raw)
                if type(msg) is not dict:
                    continue
                event = event_of(rec, msg)
                if event is None or self.control(event) is not None:
                    continue
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                continue
            yield None, (i, event)

    def fast_check(self, change: ChangeRecord) -> None:
        """Raise for a change the default :meth:`fast_group` must leave to :meth:`parse` (whose
        normalize step would quarantine it); default: its names (:func:`cdclake.names.check_names`)."""
        check_names(change)

    # -- hooks ----------------------------------------------------------------------------------

    def is_tombstone(self, value: Optional[bytes]) -> bool:
        """Whether a Kafka value stands for no value (default: None or empty)."""
        return not value

    def tombstone(self, record: KafkaRecord) -> ControlRecord:
        """The control record of a tombstone (default: no detail)."""
        return ControlRecord("tombstone", self.format_name)

    def decode(self, record: KafkaRecord) -> Optional[Event]:
        """The decoded value of a non-empty record as an :class:`Event`, or None for a tombstone.
        Raises :class:`ParseError` (usually field ``value``) for bytes that are not a message."""
        raise NotImplementedError

    def control(self, event: Event) -> Optional[ParseResult]:
        """A result that ends the parse before the row steps (a :class:`ControlRecord`, or changes
        that need no row steps); None after setting ``event.op`` to a row operation."""
        raise NotImplementedError

    def table(self, event: Event) -> None:
        """Set ``event.database``, ``event.schema_name`` and ``event.table``."""
        raise NotImplementedError

    def column_types(self, event: Event) -> None:
        """Set ``event.types`` and ``event.convert`` (the converter of the images' values)."""
        raise NotImplementedError

    def images(self, event: Event) -> None:
        """Set ``event.before`` and ``event.after`` (None where the image does not exist)."""
        raise NotImplementedError

    def primary_key(self, event: Event) -> None:
        """Set ``event.primary_key`` (and complete a delete's before image with the key's values)."""
        raise NotImplementedError

    def position(self, event: Event) -> None:
        """Set ``event.position`` and what the format carries of ``ts_ms``, ``tx_id``, ``tx_seq``,
        ``tx_last`` and ``tx_size``."""
        raise NotImplementedError

    def build(self, event: Event) -> list[ChangeRecord]:
        """The change of ``event`` (default: one :class:`ChangeRecord`; ``event.types`` is used as
        it is, so a step that shares a plan's types hands over a copy)."""
        return [ChangeRecord(
            source_format=self.format_name, source_database=event.database, source_schema=event.schema_name,
            source_table=event.table, op=event.op, before=event.before, after=event.after,
            primary_key=event.primary_key, column_types=event.types, source_position=event.position,
            source_ts_ms=event.ts_ms, tx_id=event.tx_id, tx_seq=event.tx_seq, tx_last=event.tx_last,
            tx_size=event.tx_size)]


class ColumnPlan(ABC):
    """A table plan's converters, one per column (JSON value → canonical text), each made on first
    use by :meth:`make_converter`, which a format's plan gives. :meth:`convert` raises what the
    converter raises (``ValueError`` for a value that does not fit)."""

    def __init__(self) -> None:
        self._converters: dict[str, Callable[[Any], Any]] = {}

    @abstractmethod
    def make_converter(self, col: str) -> Callable[[Any], Any]:
        """The converter of column ``col``."""

    def converter(self, col: str) -> Callable[[Any], Any]:
        """The converter of column ``col``, made once."""
        conv = self._converters.get(col)
        if conv is None:
            conv = self._converters[col] = self.make_converter(col)
        return conv

    def convert(self, col: str, value: Any) -> Any:
        """Canonical text of ``value`` in column ``col``."""
        return (self._converters.get(col) or self.converter(col))(value)


class ConfiguredTypes:
    """A table plan for messages that carry no types: the configured ``column_types`` of the table
    (canonical types), other columns read as text.

    ``types`` (column → canonical type) and :meth:`convert` (column, JSON value → canonical text,
    ``ValueError`` when a value does not fit its configured type).
    """

    def __init__(self, options: SourceOptions, database: Optional[str], schema: Optional[str], table: str):
        self.types = options.column_types(database, schema, table)

    def convert(self, col: str, value: Any) -> Optional[str]:
        """Canonical text of ``value`` in column ``col``."""
        types = self.types
        return coerce_text(value, types[col]) if col in types else to_text(value)


@dataclass(frozen=True)
class Format:
    """One vendor format, everything the pipeline knows of it in one object (as Apache Paimon's
    ``DataFormat`` carries its parser factory): each vendor package ``cdclake.formats.<vendor>``
    declares its formats in ``FORMATS``, and the closed list
    (:data:`cdclake.formats.registry.PACKAGES`) names the packages. ``FORMATS`` of
    :mod:`cdclake.formats`, the ``auto`` rules (:mod:`cdclake.formats.detect`), ``inspect`` and the
    simulator derive from these objects.

    - ``name``: the ``format`` of a source in the pipeline YAML, e.g. ``canal-json``.
    - ``parser``: the parser class, built with the source's options (a :class:`FormatParser`; its
      ``fast_parse`` is the columnar fast path, when ``FAST_PATH`` is set).
    - ``document``: the vendor document the parser implements (title, and the sections read); the
      parser's module docstring cites it in full.
    - ``detect``: the rule of ``auto``: a predicate on a :class:`~cdclake.formats.probe.Probe`
      (one Kafka value), true when the value has what marks the format's messages.
    - ``marks``: that rule in words, one line (``inspect`` and the docs show it).
    - ``yields_to``: formats whose messages this rule matches as well (Debezium's rule matches
      Arcion's and CDL's Kafka Connect payloads): a value one of them claims is theirs.
    - ``coarse_types``: carried type → the types ``inspect`` may guess instead from the values, for
      a format whose carried types are coarser than the values (CDL's Decimal without precision is
      ``string``); empty for the others.
    """

    name: str
    parser: type
    document: str
    detect: Callable[["Probe"], bool]
    marks: str
    yields_to: tuple[str, ...] = ()
    coarse_types: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
