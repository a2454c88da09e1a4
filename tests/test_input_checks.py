"""Bad id, mask and shape inputs raise a `ValueError` naming the input, in every mode.

Modes: an eager call, `predict` on arrays and on a `tf.data.Dataset`, `fit` on
arrays and on a dataset, XLA-compiled `predict` (TensorFlow, JAX). Models are
tiny and built once per module.
"""

import re

import keras
import numpy as np
import pytest

import kbert
from helpers import compile_with_xla, to_numpy
from kbert.input_checks import check_ids_in_range, check_inputs, input_rules

VOCABULARY = 30
LENGTH = 8
TINY = dict(
    vocabulary_size=VOCABULARY,
    num_layers=1,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_positions=16,
)


def encoder_inputs(batch=2, length=LENGTH):
    return {
        "token_ids": np.ones((batch, length), "int32"),
        "segment_ids": np.zeros((batch, length), "int32"),
        "padding_mask": np.ones((batch, length), "int32"),
    }


def t5_inputs():
    return {
        "encoder_token_ids": np.full((2, 6), 3, "int32"),
        "encoder_padding_mask": np.ones((2, 6), "int32"),
        "decoder_token_ids": np.full((2, 4), 3, "int32"),
        "decoder_padding_mask": np.ones((2, 4), "int32"),
    }


def dataset(*element):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(element if len(element) > 1 else element[0]).batch(2)


@pytest.fixture(scope="module")
def encoder():
    return kbert.models.build("bert_tiny", **TINY)


@pytest.fixture(scope="module")
def classifier():
    model = kbert.tasks.TextClassifier(kbert.models.build("bert_tiny", **TINY), num_classes=3)
    model.compile(optimizer="sgd")
    return model


@pytest.fixture(scope="module")
def t5():
    return kbert.models.T5(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=8,
                           intermediate_dim=16)


def with_entry(inputs, name, index, value):
    inputs = {key: array.copy() for key, array in inputs.items()}
    inputs[name][index] = value
    return inputs


# (what is wrong, the inputs, the message expected)
BAD_ENCODER_INPUTS = {
    "id at the vocabulary size": (
        with_entry(encoder_inputs(), "token_ids", (0, 0), VOCABULARY),
        "'token_ids' holds 30 at position \\(0, 0\\), outside the allowed \\[0, 30\\)",
    ),
    "negative id": (
        with_entry(encoder_inputs(), "token_ids", (1, 2), -1),
        "'token_ids' holds -1 at position \\(1, 2\\)",
    ),
    "segment id at the number of segments": (
        with_entry(encoder_inputs(), "segment_ids", (1, 1), 2),
        "'segment_ids' holds 2 at position \\(1, 1\\), outside the allowed \\[0, 2\\)",
    ),
    "mask value 2": (
        with_entry(encoder_inputs(), "padding_mask", (0, 3), 2),
        "'padding_mask' holds 2 at position \\(0, 3\\), outside the allowed 0 or 1",
    ),
    "short padding mask": (
        {**encoder_inputs(), "padding_mask": np.ones((2, 5), "int32")},
        "'padding_mask' has sequence length 5, but 'token_ids' has 8",
    ),
    "empty sequence": (encoder_inputs(length=0), "'token_ids' has an empty sequence axis"),
}


# A dataset cannot hold the shape cases: see the dataset shape test.
SHAPE_CASES = ("short padding mask", "empty sequence")


@pytest.mark.parametrize(
    "mode, case",
    [(mode, case) for mode in ("call", "predict") for case in sorted(BAD_ENCODER_INPUTS)]
    + [("predict_dataset", case) for case in sorted(set(BAD_ENCODER_INPUTS) - set(SHAPE_CASES))],
)
def test_bad_encoder_inputs_are_rejected(encoder, case, mode):
    inputs, expected = BAD_ENCODER_INPUTS[case]
    with pytest.raises(ValueError, match=expected):
        if mode == "call":
            encoder(inputs)
        elif mode == "predict":
            encoder.predict(inputs, verbose=0)
        else:
            encoder.predict(dataset(inputs), verbose=0)


def test_float_ids_are_rejected(encoder):
    inputs = {**encoder_inputs(), "token_ids": np.ones((2, LENGTH), "float32")}
    with pytest.raises(ValueError, match="'token_ids' must hold integers; received dtype float32"):
        encoder.predict(inputs, verbose=0)
    with pytest.raises(ValueError, match="'token_ids' must hold integers"):
        encoder.predict(dataset(inputs), verbose=0)


@pytest.mark.parametrize("known", [True, False])
def test_a_dataset_whose_lengths_disagree_is_rejected(encoder, known):
    import tensorflow as tf

    def element(index):
        inputs = {key: tf.constant(value[0]) for key, value in encoder_inputs().items()}
        length = 5 if known else tf.cast(index, "int32") + 5  # unknown: checked as it is read
        return {**inputs, "padding_mask": tf.ones((length,), "int32")}

    data = tf.data.Dataset.range(1).map(element).batch(1)
    expected = "'padding_mask' has sequence length 5" if known else "'padding_mask' and 'token_ids'"
    with pytest.raises(ValueError, match=expected):
        encoder.predict(data, verbose=0)


def test_valid_inputs_give_the_same_outputs_in_every_mode(encoder):
    inputs = encoder_inputs()
    inputs["token_ids"][:, 3] = VOCABULARY - 1
    expected = keras.ops.convert_to_numpy(encoder(inputs)["pooled_output"])
    np.testing.assert_allclose(encoder.predict(inputs, verbose=0)["pooled_output"], expected,
                               atol=1e-6)
    np.testing.assert_allclose(
        encoder.predict(dataset(inputs), verbose=0)["pooled_output"], expected, atol=1e-6
    )


def test_a_failed_dataset_check_leaves_the_weights_in_place(encoder):
    weights = [keras.ops.convert_to_numpy(w) for w in encoder.weights]
    bad = with_entry(encoder_inputs(), "token_ids", (0, 0), VOCABULARY)
    with pytest.raises(ValueError, match="'token_ids'"):
        encoder.predict(dataset(bad), verbose=0)
    for before, after in zip(weights, encoder.weights):
        np.testing.assert_array_equal(before, keras.ops.convert_to_numpy(after))


@pytest.mark.parametrize("data", ["arrays", "dataset"])
def test_fit_rejects_ids_beyond_the_vocabulary_and_labels_beyond_the_classes(classifier, data):
    inputs = encoder_inputs()
    labels = {"labels": np.array([0, 2])}
    cases = [
        (with_entry(inputs, "token_ids", (1, 4), VOCABULARY + 5), labels, "'token_ids' holds 35"),
        (inputs, {"labels": np.array([0, 3])}, "'labels' holds 3 at position \\(1,\\)"),
    ]
    for x, y, expected in cases:
        with pytest.raises(ValueError, match=expected):
            if data == "arrays":
                classifier.fit(x, y, verbose=0)
            else:
                classifier.fit(dataset(x, y), verbose=0)
    history = classifier.fit(dataset(inputs, labels), verbose=0)  # still trains afterwards
    assert np.isfinite(history.history["loss"][0])


def test_evaluate_and_the_batch_methods_check_their_data(classifier):
    bad = with_entry(encoder_inputs(), "segment_ids", (0, 0), 5)
    labels = {"labels": np.array([0, 1])}
    for method, arguments in [
        (classifier.evaluate, (bad, labels)),
        (classifier.train_on_batch, (bad, labels)),
        (classifier.test_on_batch, (bad, labels)),
        (classifier.predict_on_batch, (bad,)),
    ]:
        with pytest.raises(ValueError, match="'segment_ids' holds 5"):
            method(*arguments)
    with pytest.raises(ValueError, match="'segment_ids' holds 5"):
        classifier.fit(encoder_inputs(), labels, validation_data=(bad, labels), verbose=0)


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="torch has no XLA compile here")
def test_xla_compiled_predict_checks_its_data():
    model = kbert.models.build("bert_tiny", **TINY)
    model.compile(jit_compile=True)
    bad = with_entry(encoder_inputs(), "token_ids", (0, 0), VOCABULARY)
    with pytest.raises(ValueError, match="'token_ids' holds 30"):
        model.predict(bad, verbose=0)
    with pytest.raises(ValueError, match="'token_ids' holds 30"):
        model.predict(dataset(bad), verbose=0)


@pytest.mark.parametrize(
    "attention, kwargs",
    [("bigbird", {"block_size": 2, "num_random_blocks": 1}), ("longformer", {"window": 2})],
)
def test_sparse_attention_masks_of_the_wrong_length_are_rejected(attention, kwargs):
    model = kbert.models.Encoder(**TINY, attention=attention, attention_kwargs=kwargs)
    inputs = {**encoder_inputs(), "padding_mask": np.ones((2, 6), "int32")}
    for run in (model, lambda x: model.predict(x, verbose=0)):
        with pytest.raises(ValueError, match="'padding_mask' has sequence length 6"):
            run(inputs)
    if attention == "longformer":
        inputs = {**encoder_inputs(), "global_attention_mask": np.ones((2, 4), "int32")}
        with pytest.raises(ValueError, match="'global_attention_mask' has sequence length 4"):
            model.predict(inputs, verbose=0)
    layer = model.transformer_layers[0].attention_layer
    hidden = np.ones((2, 8, TINY["hidden_dim"]), "float32")
    masks = {"padding_mask": np.ones((2, 6), "int32")}
    if attention == "longformer":
        masks["global_attention_mask"] = np.ones((2, 4), "int32")
    for name, wrong in masks.items():
        message = (rf"{name} must have shape \(batch, sequence\) with the "
                   rf"query's sequence length 8; received shape {re.escape(str(wrong.shape))}")
        with pytest.raises(ValueError, match=message):
            layer(hidden, **{name: wrong})


@pytest.mark.parametrize("mode", ["call", "predict"])
def test_t5_inputs_are_checked(t5, mode):
    run = t5 if mode == "call" else (lambda x: t5.predict(x, verbose=0))
    with pytest.raises(ValueError, match="'decoder_token_ids' holds 30 at position \\(1, 0\\)"):
        run(with_entry(t5_inputs(), "decoder_token_ids", (1, 0), VOCABULARY))
    with pytest.raises(ValueError, match="'encoder_padding_mask' has encoder_sequence length 3"):
        run({**t5_inputs(), "encoder_padding_mask": np.ones((2, 3), "int32")})


def test_seq2seq_targets_beyond_the_vocabulary_are_rejected(t5):
    model = kbert.tasks.Seq2SeqLM(t5)
    model.compile(optimizer="sgd")
    targets = np.full((2, 4), VOCABULARY, "int32")
    with pytest.raises(ValueError, match="'target_ids' holds 30"):
        model.fit(t5_inputs(), targets, verbose=0)
    with pytest.raises(ValueError, match="'target_ids' holds 30"):
        model.fit(dataset(t5_inputs(), targets), verbose=0)


def test_task_positions_and_labels_are_checked(encoder):
    question_answering = kbert.tasks.SpanQuestionAnswering(encoder)
    targets = {"start_positions": np.array([0, LENGTH]), "end_positions": np.array([-1, 1])}
    with pytest.raises(ValueError, match="'start_positions' holds 8 at position \\(1,\\)"):
        check_inputs(question_answering, encoder_inputs(), targets)
    with pytest.raises(ValueError, match="'question_mask' holds 3"):
        question_answering(with_entry({**encoder_inputs(), "question_mask": np.zeros((2, LENGTH),
                                                                                      "int32")},
                                      "question_mask", (0, 1), 3))
    tagger = kbert.tasks.TokenClassifier(encoder, num_labels=3)
    with pytest.raises(ValueError, match="'labels' has sequence length 4"):
        check_inputs(tagger, encoder_inputs(), {"labels": np.zeros((2, 4), "int32")})
    choices = kbert.tasks.MultipleChoice(encoder, num_choices=3)
    three_d = {key: np.stack([value] * 2, axis=1) for key, value in encoder_inputs().items()}
    expected = "'token_ids' must have shape \\(batch, num_choices=3, sequence\\)"
    with pytest.raises(ValueError, match=expected):
        choices(three_d)


def test_pretrainer_mask_positions_beyond_the_sequence_are_rejected(encoder):
    pretrainer = kbert.pretraining.BertPretrainer(encoder, pair_objective=None)
    inputs = {**encoder_inputs(), "mask_positions": np.array([[1, LENGTH], [0, 2]])}
    with pytest.raises(ValueError, match="'mask_positions' holds 8 at position \\(0, 1\\), outside "
                                         "the allowed \\[0, 8\\) \\(the sequence length\\)"):
        pretrainer(inputs)
    targets = {"mask_ids": np.array([[1, 31], [1, 1]]), "mask_weights": np.ones((2, 2))}
    inputs["mask_positions"][0, 1] = 3
    with pytest.raises(ValueError, match="'mask_ids' holds 31"):
        check_inputs(pretrainer, inputs, targets)


def test_rules_come_from_the_model_tables(encoder, t5):
    rules = input_rules(kbert.tasks.MultipleChoice(encoder, num_choices=2))
    assert rules["token_ids"][0].dims == ("batch", "num_choices", "sequence")
    assert rules["segment_ids"][1] == 2
    assert input_rules(t5)["decoder_token_ids"][1] == VOCABULARY


def test_symbolic_inputs_get_the_static_shape_checks(encoder):
    inputs = {
        "token_ids": keras.Input((8,), dtype="int32"),
        "segment_ids": keras.Input((8,), dtype="int32"),
        "padding_mask": keras.Input((5,), dtype="int32"),
    }
    with pytest.raises(ValueError, match="'padding_mask' has sequence length 5"):
        check_inputs(encoder, inputs)
    check_inputs(encoder, {**inputs, "padding_mask": keras.Input((None,), dtype="int32")})


def test_check_ids_in_range_accepts_valid_ids():
    assert check_ids_in_range(np.array([[0, 5], [3, 1]]), 6, "Token id") is None
    ids = keras.ops.convert_to_tensor(np.array([[0, 5]], "int32"))
    assert check_ids_in_range(ids, 6, "Token id") is None
    assert check_ids_in_range(np.zeros((2, 0), "int32"), 6, "Token id") is None


@pytest.mark.parametrize(
    "ids, bad",
    [([[0, 6]], 6), ([[0, 40], [2, 3]], 40), ([[-3, 2]], -3), ([[-1, 9]], 9)],
)
def test_check_ids_in_range_names_the_offending_id(ids, bad):
    ids = keras.ops.convert_to_tensor(np.array(ids, "int32"))
    message = (rf"Segment id {bad} is outside the valid range \[0, 6\)\. "
               rf"Received ids of shape \({len(to_numpy(ids))}, 2\)")
    with pytest.raises(ValueError, match=message):
        check_ids_in_range(ids, 6, "Segment id")


def test_check_ids_in_range_is_a_no_op_on_traced_tensors():
    def fn(ids):
        check_ids_in_range(ids, 6, "Token id")
        return ids + 0

    outputs = compile_with_xla(fn)(keras.ops.convert_to_tensor(np.array([[7, 1]], "int32")))
    np.testing.assert_array_equal(to_numpy(outputs), [[7, 1]])


def test_check_ids_in_range_is_a_no_op_on_keras_tensors():
    assert check_ids_in_range(keras.Input((4,), dtype="int32"), 6, "Token id") is None


def test_check_ids_in_range_reads_nothing_inside_fit_which_checked_at_entry():
    """An eager step (every PyTorch step) would otherwise read the ids back to the host."""
    model = kbert.tasks.TextClassifier(kbert.models.bert_tiny(**TINY), num_classes=2)
    model.compile(optimizer="sgd")
    seen = []

    class Spy(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(check_ids_in_range(np.array([[VOCABULARY]]), VOCABULARY, "Token id"))

    inputs = encoder_inputs()
    model.fit(inputs, {"labels": np.zeros((2,), "int32")}, epochs=1, verbose=0, callbacks=[Spy()])
    assert seen == [None]
    with pytest.raises(ValueError, match="Token id 30 is outside"):  # and outside fit it checks again
        check_ids_in_range(np.array([[VOCABULARY]]), VOCABULARY, "Token id")
