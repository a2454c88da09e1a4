"""`TaskExamples`: the examples of one fine-tuning file, as `kbert finetune`'s task specs pass them around."""

import dataclasses


@dataclasses.dataclass
class TaskExamples:
    """The examples of one file, the label vocabulary (classify, tag), the SQuAD JSON (qa).

    `examples` are the dicts of a `kbert.tasks.readers` reader; `labels` the
    training file's label vocabulary; `squad` the file's JSON, to score against.

    >>> data = TaskExamples([{"text": "A fine film.", "label": "1"}, {"words": ["Paris"], "tags": ["B-LOC"]}])
    >>> data.texts()
    ['A fine film.', 'Paris']
    """

    examples: list
    labels: list = None
    squad: dict = None

    def texts(self):
        """Every text of the examples, to learn a vocabulary from."""
        texts = []
        for example in self.examples:
            for key in ("text", "text_pair", "question", "context", "source", "target"):
                texts += [example[key]] if key in example else []
            texts += [" ".join(example.get("words", []))] + list(example.get("choices", []))
        return [text for text in texts if text]
