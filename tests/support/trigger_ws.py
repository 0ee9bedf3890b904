"""A trigger workspace for tests: the skill ``csv-to-json`` with a narrow description, three
distractor skills, should-trigger queries phrased in other words, and near-miss negatives (queries
sharing its words that belong to a distractor)."""

from __future__ import annotations

import json
from pathlib import Path

OLD_DESCRIPTION = "description: Converts CSV files to JSON."
NEW_DESCRIPTION = (
    "description: Converts comma separated or tabular data (CSV files, spreadsheet exports, rows with a"
    " header line, delimited text) into JSON records, objects or dicts."
)
SKILL_MD = f"""---
name: csv-to-json
{OLD_DESCRIPTION}
---
# CSV to JSON

Read the rows with Python's csv module and print a JSON list of objects.
"""
DISTRACTORS = {
    "yaml-tools": "Converts JSON files to YAML and YAML files back to JSON.",
    "chart-maker": "Makes charts and plots from spreadsheet data.",
    "pdf-tools": "Extracts text and tables from PDF files.",
}
SHOULD = [  # (query, split): the skill should load
    ("Turn this spreadsheet export into JSON records", "train"),
    ("I have comma separated rows, give me json objects", "train"),
    ("Make these tabular rows with a header line into dicts", "train"),
    ("Convert my CSV to JSON please", "train"),
    ("Parse delimited text rows into a list of JSON objects", "val"),
    ("Export rows of this CSV file as JSON", "val"),
    ("Read the tabular data below and emit JSON records", "val"),
    ("Here are rows with a header line; return them as dicts", "val"),
    ("My spreadsheet export should become JSON objects", "val"),
    ("Comma separated values to JSON records, one per row", "test"),
    ("Tabular export from the bank: give JSON objects", "test"),
    ("These delimited lines need to be dicts", "test"),
]
NEAR_MISS = [  # shares words with the skill, belongs elsewhere (or nowhere)
    ("Convert this JSON file to YAML", "train"),
    ("Make a chart from this spreadsheet data", "train"),
    ("Extract the tables from this PDF file", "train"),
    ("Write a JSON schema for my API", "train"),
    ("Convert the YAML config back to JSON", "val"),
    ("Plot a chart of the spreadsheet data by month", "val"),
    ("Extract text from the PDF files in this folder", "val"),
    ("Validate this JSON document against its schema", "val"),
    ("Turn the YAML file into JSON", "val"),
    ("Pull the tables out of these PDF reports", "test"),
    ("Convert JSON files back to YAML", "test"),
    ("Draw plots from my spreadsheet data", "test"),
]


SMALL = {  # a round of a few minutes with the real CLI: 4 train, 6 val (4 missed before), no test
    "Turn this spreadsheet export into JSON records",
    "I have comma separated rows, give me json objects",
    "Convert this JSON file to YAML",
    "Make a chart from this spreadsheet data",
    "Parse delimited text rows into a list of JSON objects",
    "Read the tabular data below and emit JSON records",
    "Here are rows with a header line; return them as dicts",
    "My spreadsheet export should become JSON objects",
    "Convert the YAML config back to JSON",
    "Plot a chart of the spreadsheet data by month",
}


def write_trigger_inputs(root: Path, small: bool = False) -> tuple[Path, Path, Path]:
    """(skill dir, tasks file, distractors dir) under ``root``; ``small``: only the SMALL queries."""
    skill = root / "csv-to-json"  # the spec: a skill folder is named as the skill
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    distractors = root / "distractors"
    for name, desc in DISTRACTORS.items():
        (distractors / name).mkdir(parents=True)
        (distractors / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {desc}\n---\nDo it.\n")
    rows = [
        {"id": f"{kind}-{i:02d}", "input": q, "answer": {"trigger": kind == "yes"}, "split": split}
        for kind, group in (("yes", SHOULD), ("near", NEAR_MISS))
        for i, (q, split) in enumerate(group)
        if not small or q in SMALL
    ]
    tasks = root / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return skill, tasks, distractors
