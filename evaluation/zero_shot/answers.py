"""Vision-language models answer in words: mapping a free-text answer to a class of the label space.

The docs give the model `VLM_PROMPT` with each image. An answer maps to a class by exact match,
after `normalise_answer`, on the names of the label space's classes: the toolkit's class name, its
WordNet synonyms (the `synonyms` column of builder/data/imagenet_classes.tsv, comma-separated
lemmas) and the curated name CLIP's authors published. Exact means:

- case does not count ("Goldfish" = "goldfish"), nor surrounding whitespace, runs of spaces, one
  leading article ("a", "an", "the") or trailing punctuation (". , ; : ! ?");
- nothing else is forgiven: no plural forms ("goldfishes" and "tench" are different words to it;
  a singulariser is fuzzy matching by another name, and "glasses" or "bus" show where rules break),
  no spelling variants, no words around the name ("a photo of a tench" does not map).

The result is the class index, or `UNMAPPED` (no class has that name), or `AMBIGUOUS` (several
classes of the label space do: "crane" is a bird and a machine, "maillot" two garments). Both count
as wrong and are counted in their own column. A narrower label space can resolve an ambiguity: on
a set holding only the machine, "crane" is the machine.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from builder.core.classes import imagenet_classes

from .class_names import label_space_indices
from .published import clip_class_names

VLM_PROMPT = "What is the main object in this image? Answer with its name only."
MAPPED, UNMAPPED, AMBIGUOUS = "mapped", "unmapped", "ambiguous"
ANSWER_STATUSES = (MAPPED, UNMAPPED, AMBIGUOUS)
NO_CLASS = -1
ARTICLES = ("a", "an", "the")
TRAILING_PUNCTUATION = ".,;:!?"
_SPACES = re.compile(r"\s+")


def normalise_answer(text: str) -> str:
    """`text` as it is compared: case-folded, spaces collapsed, trailing punctuation and one leading
    article dropped."""
    text = _SPACES.sub(" ", text).strip().casefold()
    text = text.rstrip(TRAILING_PUNCTUATION + " ")
    head, _, rest = text.partition(" ")
    if head in ARTICLES and rest:
        text = rest
    return text


@dataclass(frozen=True)
class MappedAnswer:
    label: int  # the ImageNet class index, or NO_CLASS (-1)
    status: str  # MAPPED, UNMAPPED or AMBIGUOUS
    candidates: tuple[int, ...]  # the classes the answer names (several when ambiguous)


class AnswerVocabulary:
    """The names of a label space's classes, normalised, each with the classes it names."""

    def __init__(
        self,
        label_space: Sequence[int | str] | None = None,
        extra_names: Mapping[int, Iterable[str]] | None = None,
        clip_names: bool = True,
    ) -> None:
        """`extra_names`: more names per class index (e.g. the class names a run gave its model);
        `clip_names`: include CLIP's curated names (they need open-clip-torch installed)."""
        self.label_space = label_space_indices(label_space)
        published = clip_class_names() if clip_names else None
        classes = imagenet_classes()
        terms: dict[str, set[int]] = {}
        for index in self.label_space:
            names = [classes[index].name, *classes[index].synonyms.split(",")]
            if published is not None:
                names.append(published[index])
            names.extend((extra_names or {}).get(index, ()))
            for name in names:
                term = normalise_answer(name)
                if term:
                    terms.setdefault(term, set()).add(index)
        self.terms = {term: tuple(sorted(indices)) for term, indices in terms.items()}

    def describe(self) -> dict:
        """What a run records of the vocabulary: its classes, its terms and their sha256 (a digest of
        the sorted term -> classes table, so a changed synonym list shows in the record)."""
        table = json.dumps(sorted(self.terms.items()), ensure_ascii=False)
        return {
            "classes": len(self.label_space),
            "terms": len(self.terms),
            "sha256": hashlib.sha256(table.encode("utf-8")).hexdigest(),
        }

    def map(self, answer: str | None) -> MappedAnswer:
        """The class `answer` names; no answer (None) is unmapped."""
        candidates = self.terms.get(normalise_answer(answer), ()) if isinstance(answer, str) else ()
        if len(candidates) == 1:
            return MappedAnswer(candidates[0], MAPPED, candidates)
        return MappedAnswer(NO_CLASS, AMBIGUOUS if candidates else UNMAPPED, candidates)

    def map_many(self, answers: Iterable[str | None]) -> tuple[np.ndarray, np.ndarray]:
        """(class index or -1 per answer as int64, status per answer as strings), for a predictions
        table; each distinct answer is looked up once."""
        answers = list(answers)
        looked_up = {answer: self.map(answer) for answer in dict.fromkeys(answers)}
        labels = np.fromiter((looked_up[answer].label for answer in answers), dtype=np.int64, count=len(answers))
        statuses = np.array([looked_up[answer].status for answer in answers], dtype=f"<U{len(AMBIGUOUS)}")
        return labels, statuses


def map_answers(
    answers: Iterable[str | None], label_space: Sequence[int | str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`AnswerVocabulary(label_space).map_many(answers)`."""
    return AnswerVocabulary(label_space).map_many(answers)
