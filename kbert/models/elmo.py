"""ELMo, the bidirectional LSTM language model of "Deep contextualized word representations"."""

import keras
from keras import ops

from kbert.arguments import positive_int, probability
from kbert.input_checks import ids, mask
from kbert.layers.character_cnn import ELMO_FILTERS, CharacterCNN
from kbert.layers.dropout import Dropout, checked_dropout_prng
from kbert.layers.projected_lstm import ProjectedLSTM
from kbert.models.backbone import Backbone


@keras.saving.register_keras_serializable(package="kbert")
class ELMo(Backbone):
    """ELMo's biLM (Peters et al. 2018; AllenNLP's `_ElmoBiLm`), up to its layer representations.

    A `CharacterCNN` encodes each token from its characters into `x_k`; a
    forward and a backward stack of `num_layers` `ProjectedLSTM`s read the
    sequence, each layer after the first adding its input to its output (the
    residual connection). The backward LSTMs run from the end of each row's
    real tokens. The representations ScalarMix mixes are `[x_k; x_k]` and, for
    each layer `j`, `[→h_kj; ←h_kj]` (docs/algorithms.md §14), zeros at padding.
    The language model softmax, shared by both directions, belongs to the
    pretrainer (`kbert.pretraining.BiLMPretrainer`), as a backbone owns no loss.

    Inputs: `character_ids` int `(batch, sequence, max_characters)` (see
    `kbert.text.character_ids`: id 0 pads, sentences are usually wrapped in
    `<S>` and `</S>`) and `padding_mask` `(batch, sequence)`, real tokens first.

    Outputs: `token_output` `(batch, sequence, hidden_dim)` (`x_k`),
    `forward_output` and `backward_output` `(batch, sequence, hidden_dim)` (the
    top layer of each direction, what the language models read), and
    `layer_outputs` `(batch, num_layers + 1, sequence, 2 · hidden_dim)`.

    Args:
        hidden_dim: token and projected LSTM width (ELMo: 512).
        cell_dim: LSTM cells (4096).
        num_layers: LSTM layers per direction (2).
        filters: the character CNN's `(width, count)` pairs (`ELMO_FILTERS`).
        num_characters: character ids (262).
        max_characters: characters per token (50).
        character_dim: character embedding width (16).
        num_highway: highway layers (2).
        cell_clip: LSTM cell clip (3).
        projection_clip: LSTM projection clip (3).
        dropout: on the input of each LSTM layer while training (bilm-tf: 0.1).
        dropout_prng: every dropout's JAX generator, None for the process default (`kbert.layers.Dropout`).
        dtype: dtype policy.

    Example:
    >>> model = ELMo(hidden_dim=4, cell_dim=8, filters=[(1, 4), (2, 4)])
    >>> outputs = model({"character_ids": keras.ops.ones((2, 3, 50), "int32"),
    ...                  "padding_mask": keras.ops.ones((2, 3), "int32")})
    >>> tuple(outputs["layer_outputs"].shape)
    (2, 3, 3, 8)

    References:
        Peters et al., "Deep contextualized word representations", NAACL 2018.
    """

    # What trains it (a backbone owns no loss).
    TRAINED_BY = "kbert.pretraining.BiLMPretrainer"
    INPUT_TABLE = {
        "character_ids": ids("num_characters", ("batch", "sequence", "max_characters")),
        "padding_mask": mask(),
    }

    def __init__(self, hidden_dim=512, cell_dim=4096, num_layers=2, filters=ELMO_FILTERS,
                 num_characters=262, max_characters=50, character_dim=16, num_highway=2,
                 cell_clip=3.0, projection_clip=3.0, dropout=0.0, dropout_prng=None, dtype=None, **kwargs):
        # === Config ===
        self.hidden_dim = positive_int("hidden_dim", hidden_dim)
        self.cell_dim = positive_int("cell_dim", cell_dim)
        self.num_layers = positive_int("num_layers", num_layers)
        self.filters = tuple(tuple(pair) for pair in filters)
        self.num_characters = positive_int("num_characters", num_characters)
        self.max_characters = positive_int("max_characters", max_characters)
        self.character_dim = character_dim
        self.num_highway = num_highway
        self.cell_clip = cell_clip
        self.projection_clip = projection_clip
        self.dropout = probability("dropout", dropout)
        self.dropout_prng = checked_dropout_prng(dropout_prng)

        # === Layers ===
        self.token_encoder = CharacterCNN(
            hidden_dim, filters, num_characters, character_dim, num_highway, dtype=dtype,
            name="token_encoder",
        )
        self.forward_layers = self._lstm_stack("forward", go_backwards=False, dtype=dtype)
        self.backward_layers = self._lstm_stack("backward", go_backwards=True, dtype=dtype)
        self.lstm_dropout = Dropout(dropout, dtype=dtype, dropout_prng=self.dropout_prng, name="lstm_dropout")

        # === Functional graph ===
        inputs = {
            "character_ids": keras.Input((None, max_characters), dtype="int32", name="character_ids"),
            "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask"),
        }
        kwargs.setdefault("name", "elmo")
        super().__init__(inputs=inputs, outputs=self._run_layers(inputs), dtype=dtype, **kwargs)

    def _lstm_stack(self, direction, go_backwards, dtype):
        return [
            ProjectedLSTM(self.cell_dim, self.hidden_dim, self.cell_clip, self.projection_clip,
                          go_backwards=go_backwards, dtype=dtype, name=f"{direction}_lstm_{index}")
            for index in range(self.num_layers)
        ]

    def _run_layers(self, inputs):
        padding_mask = inputs["padding_mask"]
        tokens = self.token_encoder(inputs["character_ids"])
        tokens = tokens * ops.cast(padding_mask, tokens.dtype)[:, :, None]
        layers = [ops.concatenate([tokens, tokens], axis=-1)]
        forward = backward = tokens
        for index, (forward_lstm, backward_lstm) in enumerate(zip(self.forward_layers, self.backward_layers)):
            new_forward = forward_lstm(self.lstm_dropout(forward), padding_mask=padding_mask)
            new_backward = backward_lstm(self.lstm_dropout(backward), padding_mask=padding_mask)
            if index > 0:  # the residual connection from the layer below
                new_forward, new_backward = new_forward + forward, new_backward + backward
            forward, backward = new_forward, new_backward
            layers.append(ops.concatenate([forward, backward], axis=-1))
        return {
            "token_output": tokens,
            "forward_output": forward,
            "backward_output": backward,
            "layer_outputs": ops.stack(layers, axis=1),
        }
