"""Analysis: figures, tables and the HTML report, computed from a results folder alone."""
