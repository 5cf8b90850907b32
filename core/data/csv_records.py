"""Records of a puzzle CSV file (the reference datasets' ``source,question,answer,rating``
layout): the header and field-count checks and the translation of read errors, shared by the
data sources that import such files.

Every problem is a TrmError naming the file, the line and what to do; the setting a user
gave the path in is named as ``data.generate.csv``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from trm.errors import TrmError


def csv_records(
    file: Path, header: tuple[str, ...], kind: str
) -> Iterator[tuple[int, int, list[str]]]:
    """``(record number, line number, fields)`` for each non-blank row after the header.

    Record 1 is the first row after the header. ``kind`` names the file's layout in messages
    ("a maze CSV file"). The header must be ``header`` (cells stripped; a UTF-8 byte-order mark
    is allowed) and every record must have ``len(header)`` fields.
    """
    file = Path(file)
    try:
        with open(file, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            first = next(reader, None)
            if first is None or tuple(h.strip() for h in first) != header:
                raise TrmError(
                    f"{file} line 1: expected the header {','.join(header)}, got "
                    f"{','.join(first or [])!r}"
                )
            number = 0
            for fields in reader:
                if not fields:
                    continue
                number += 1
                if len(fields) != len(header):
                    raise TrmError(
                        f"{file} row {number} (line {reader.line_num}): expected "
                        f"{len(header)} fields "
                        f"({','.join(header)}), got {len(fields)}"
                    )
                yield number, reader.line_num, fields
    except OSError as error:
        reason = error.strerror or str(error)
        raise TrmError(
            f"cannot read {file}: {reason}; check the path and its permissions (data.generate.csv)"
        ) from None
    except UnicodeDecodeError:
        raise TrmError(
            f"{file} is not UTF-8 text; give {kind} saved as UTF-8 (data.generate.csv)"
        ) from None
    except csv.Error as error:
        raise TrmError(f"{file} is not a readable CSV file ({error}) (data.generate.csv)") from None
