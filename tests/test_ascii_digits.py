"""Numbers in positions and integer fields are ASCII digits: other scripts' digits are refused.

``str.isdigit`` and the regular expression ``\\d`` also take the digits of other scripts, and
``int`` reads them: ``int("١٢٣") == 123``. No source writes a binlog position, an LSN, a change
sequence or an integer column that way, so such a value is quarantined with its field (or, for
DTS's ``sourcePosition``, not read as a binlog position) instead of being read as a number.
"""
from __future__ import annotations

import pytest

from cdclake.errors import ParseError
from cdclake.formats import fields
from cdclake.formats.dts.parser import parse_position
from cdclake.formats.shareplex import meta_idx
from cdclake.positions import as_element, binlog_file_number, pg_lsn

ARABIC_123 = "\u0661\u0662\u0663"      # ١٢٣
FULLWIDTH_42 = "\uff14\uff12"           # ４２
DEVANAGARI_7 = "\u096d"                 # ७


@pytest.mark.parametrize("text", [ARABIC_123, FULLWIDTH_42, DEVANAGARI_7, "1" + ARABIC_123])
def test_a_position_element_in_other_digits_is_refused(text):
    with pytest.raises(ValueError, match="not a non-negative integer"):
        as_element(text, "changeSequence")
    with pytest.raises(ParseError, match="source.pos"):
        fields.element("debezium-json", text, "source.pos")
    with pytest.raises(ValueError):
        pg_lsn(text)


def test_ascii_digits_are_still_read():
    assert as_element(" 123 ") == 123
    assert pg_lsn("42") == 42 and pg_lsn("1/0") == 1 << 32
    assert binlog_file_number("mysql-bin.000010") == 10
    assert fields.integer("x", "-17", "f") == -17
    assert meta_idx({"idx": "3/11"}) == (3, 11)
    assert parse_position("194@10", 7) == (10, 194, 7)


def test_a_binlog_file_numbered_in_other_digits_is_refused():
    with pytest.raises(ValueError, match="does not end in a sequence number"):
        binlog_file_number("mysql-bin." + ARABIC_123)


def test_an_integer_field_in_other_digits_is_refused():
    with pytest.raises(ParseError, match="is not an integer"):
        fields.integer("canal-json", FULLWIDTH_42, "id")


def test_a_shareplex_index_in_other_digits_is_refused():
    with pytest.raises(ParseError, match="meta.idx"):
        meta_idx({"idx": f"{ARABIC_123}/{FULLWIDTH_42}"})


def test_a_dts_source_position_in_other_digits_is_not_a_binlog_position():
    assert parse_position(f"{ARABIC_123}@{DEVANAGARI_7}", 9) == (9,)
