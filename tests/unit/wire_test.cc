// Being written (issue 15).
