"""`first_few`: the names an error message shows, and how many it leaves out."""

from builder.core.errors import first_few


def test_first_few_names_the_first_five_then_counts_the_rest():
    assert first_few([]) == ""
    assert first_few(["a", "b"]) == "a, b"
    assert first_few([f"f{i}" for i in range(5)]) == "f0, f1, f2, f3, f4"
    assert first_few([f"f{i}" for i in range(8)]) == "f0, f1, f2, f3, f4 and 3 more"
    assert first_few(iter("xyz"), limit=2) == "x, y and 1 more"
