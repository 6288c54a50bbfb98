"""The benchmark's task taxonomy (Section 3.2): 12 tasks in three capability families, plus EA."""

from __future__ import annotations

CROSS_SESSION = ("ER", "EST", "TR")
PERCEPTION = ("ACR", "CT", "OCR", "STU")
ADAPTIVE = ("ERA", "RCR", "MPA", "PRM", "TPG")
MCQA_TASKS = CROSS_SESSION + PERCEPTION
TASKS = MCQA_TASKS + ADAPTIVE
EA = "EA"

FAMILIES: dict[str, tuple[str, ...]] = {
    "cross_session": CROSS_SESSION,
    "perception": PERCEPTION,
    "adaptive": ADAPTIVE,
    "ea": (EA,),
}
FAMILY_OF: dict[str, str] = {task: fam for fam, tasks in FAMILIES.items() for task in tasks}

MCQA_OPTIONS = ("A", "B", "C", "D")
EA_OPTIONS = ("A", "B", "C", "D", "E")
EA_UNAVAILABLE_OPTION = "E"
