"""N <-> (chunk, file) and the enumerator (file_format.md §2, multi_device_storage.md §1.3)."""

import pytest

from egopool import LayoutError, display_suffix, episode_chunk_file, episode_index_from


@pytest.mark.parametrize("n,chunk,file", [(1, 0, 0), (999, 0, 998), (1000, 0, 999), (1001, 1, 0),
                                          (2000, 1, 999), (2001, 2, 0)])
def test_n_chunk_file_round_trip(n, chunk, file):
    assert episode_chunk_file(n) == (chunk, file)
    assert episode_index_from(chunk, file) == n


def test_display_suffix_is_file_number():
    assert display_suffix(12) == "_ep000011"
    assert display_suffix(1001) == "_ep000000"


@pytest.mark.parametrize("bad", [0, -1, True, 1.0])
def test_n_must_be_positive_int(bad):
    with pytest.raises(LayoutError):
        episode_chunk_file(bad)
