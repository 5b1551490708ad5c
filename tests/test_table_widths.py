"""Table widths on a narrow screen (``thub.ui.output.column_widths``): a column whose cells hold no
word (all empty, as ``thub envs`` shows for an environment with no recorded backends) still gets a
width; it was ``TypeError: 'int' object is not iterable``."""

from __future__ import annotations

from thub.ui.output import column_widths


def test_a_column_of_empty_cells_gets_its_header_width() -> None:
    columns = ["environment", "backends", "python"]
    rows = [["/a/long/path/to/a/managed/environment/of/thub", "", "3.11"],
            ["/another/long/path/to/a/managed/environment", " ", "3.12"]]
    widths = column_widths(columns, rows, 40)
    assert widths is not None and len(widths) == 3
    assert widths[1] >= len("backends") and sum(widths) <= 40 - 2


def test_a_table_that_fits_is_left_alone() -> None:
    assert column_widths(["a", "b"], [["", "x"]], 80) is None
