"""Every supported wire format of the simulated source: how to render it and how to configure it.

Used by the demo and the tests to run the same simulated history through every format.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from cdclake.sim.render import Message, canal_json, debezium_json
from cdclake.sim.render_arcion import arcion_json


@dataclass(frozen=True)
class WireFormat:
    """A pipeline format name, a short tag (topic and table prefix), a renderer and source options."""

    format: str
    tag: str
    render: Callable[..., list[Message]]
    partitions: int = 1
    options: dict = field(default_factory=dict)

    def messages(self, history: Sequence, tables: dict) -> list[Message]:
        """The history rendered in this format, spread over :attr:`partitions`."""
        return self.render(history, tables, partitions=self.partitions)


WIRE_FORMATS: list[WireFormat] = [
    WireFormat("debezium-json", "dbz", debezium_json, partitions=3),
    WireFormat("canal-json", "canal", canal_json, partitions=2),
    WireFormat("arcion-json", "arcion", arcion_json, partitions=3),
]
