"""The check every text-level call makes first: strings, none of them empty. No TensorFlow."""


def check_texts(texts, what="text"):
    """`(list of strings, was_one_string)`; a `ValueError` for a non-string or an empty string.

    >>> check_texts("A film.")
    (['A film.'], True)
    >>> check_texts(["fine", " "], "question")
    Traceback (most recent call last):
    ...
    ValueError: question 1 is empty; give some text.
    """
    single = isinstance(texts, str)
    texts = [texts] if single else texts
    if not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError(f"Give a {what} as a string or a non-empty list of strings.")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{what} {index} is a {type(text).__name__}, not a string.")
        if not text.strip():
            raise ValueError(f"{what} {index} is empty; give some text.")
    return list(texts), single
