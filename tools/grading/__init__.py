"""The grader of the book's assignments (``tools/grade.py``): specs, notebooks, the student's
kernel, the tests run in the grader's own process, feedback and exports.  See ``cli`` for the
commands and ``assignments/README.md`` for what it protects and what it does not."""
