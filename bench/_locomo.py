"""The LoCoMo conversations (``../shared/data/locomo``): one loader for the
benches that read them. See that folder's README for the format."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

KS = (5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"


@dataclass
class Turn:
    dia_id: str
    name: str
    role: str
    content: str
    session: int
    created: datetime | None


@dataclass
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass
class Conversation:
    sample: str
    turns: list[Turn]
    questions: list[Question]


def message_content(turn: dict[str, object]) -> str:
    """The text a real agent would store: the turn, plus the caption of a
    shared image (what an image-captioning step gives the agent)."""
    text = str(turn["text"])
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares: {caption}]"
    return text


def parse_date(text: str) -> datetime | None:
    """``1:56 pm on 8 May, 2023`` -> datetime (None when unparsable)."""
    try:
        return datetime.strptime(text.replace(",", ""), "%I:%M %p on %d %B %Y")
    except ValueError:
        return None


def load(path: Path) -> list[Conversation]:
    convs = []
    for file in sorted(path.glob("*.json")):
        raw = json.loads(file.read_text())
        a = raw["speaker_a"]
        sessions = sorted(
            (int(m.group(1)), key)
            for key in raw
            if (m := re.fullmatch(r"session_(\d+)", key)) and raw[key]
        )
        turns = [
            Turn(
                dia_id=str(t["dia_id"]),
                name=str(t["speaker"]),
                role="user" if t["speaker"] == a else "assistant",
                content=message_content(t),
                session=n,
                created=parse_date(str(raw.get(f"{key}_date_time", ""))),
            )
            for n, key in sessions
            for t in raw[key]
        ]
        questions = [
            Question(
                text=str(q["question"]),
                category=int(q["category"]),
                evidence=frozenset(
                    e.strip() for ev in q["evidence"] for e in re.split(r"[;,]", ev) if e.strip()
                ),
            )
            for q in raw["qa"]
            if int(q["category"]) in CATEGORIES and q["evidence"]
        ]
        convs.append(Conversation(file.stem, turns, questions))
    return convs
