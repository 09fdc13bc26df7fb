"""What the tiny test models share: the text their tokenizers are trained on, their width, and
how a model and its processor are written (:mod:`ragspine.models.testing`,
:mod:`ragspine.models.testing_text`)."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

#: Text the tiny tokenizers are trained on (report language, digits, punctuation).
CORPUS = [
    "Revenue grew by twelve percent in the third quarter while operating costs fell.",
    "The chart shows quarterly sales by region, with Asia leading growth since 2019.",
    "Net income, gross margin and free cash flow are reported in millions of dollars.",
    "Figure 3: market share of mobile operators; Table 2 lists the survey questions.",
    "Describe the image. User: Assistant: query answer page table figure document",
    "the cat sat on the mat and the dog slept in the sun",
    "0 1 2 3 4 5 6 7 8 9 10 25 50 75 100 percent % $ ",
    " ".join(string.punctuation),
]

HIDDEN = 32  # text and vision width of every tiny model


def save(model: Any, processor: Any, folder: Path) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
