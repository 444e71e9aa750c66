"""Solutions to the workbook's exercises, one module per notebook (``ex01`` for ``01_*.ipynb``).

Try the exercise first: each notebook's solution cell imports one of these
functions, prints its source and runs the same check as your answer's.
``mambalab.workbook.check`` computes the expected answers with the library
itself, never with these functions, so a solution is checked like yours.
"""
