"""`kbert.text.pair_packing.pack` against the layout BERT's inputs have."""

import numpy as np
import pytest

from kbert.text.pair_packing import pack

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run


def test_pack_layout():
    ids, segments, mask = pack([7, 8, 9], [10, 11], 10, cls_id=2, sep_id=3, pad_id=0)
    np.testing.assert_array_equal(ids, [2, 7, 8, 9, 3, 10, 11, 3, 0, 0])
    np.testing.assert_array_equal(segments, [0, 0, 0, 0, 0, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(mask, [1, 1, 1, 1, 1, 1, 1, 1, 0, 0])
    ids, segments, mask = pack([7], None, 4, cls_id=2, sep_id=3)
    np.testing.assert_array_equal(ids, [2, 7, 3, 0])
    assert ids.dtype == segments.dtype == mask.dtype == np.int32
    with pytest.raises(ValueError, match="more than sequence_length=4"):
        pack([7, 8], [9], 4, cls_id=2, sep_id=3)
