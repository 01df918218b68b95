"""Dates as conversations write them (``1:56 pm on 8 May, 2023``), parsed without a third party."""

from __future__ import annotations

import re
from datetime import date, datetime

DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y")


def parse_when(text: str) -> datetime | None:
    """``1:56 pm on 8 May, 2023`` → 2023-05-08 13:56; a date with no time → midnight; else None."""
    cleaned = " ".join(text.split())
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt)
        except ValueError:
            continue
    match = re.search(r"(\d{1,2}) ([A-Za-z]+),? (\d{4})", cleaned)
    if match:
        for fmt in ("%d %B %Y", "%d %b %Y"):
            try:
                return datetime.strptime(" ".join(match.groups()), fmt)
            except ValueError:
                continue
    return None


def parse_date(text: object) -> date | None:
    when = parse_when(text) if isinstance(text, str) else None
    return when.date() if when else None
