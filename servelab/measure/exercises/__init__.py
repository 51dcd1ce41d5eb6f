"""The expected answers of the chapters' exercises, computed from a run's data by the code the solutions use.

One module per chapter; each `*_cases` function returns the cases `servelab.book.exercise_check.check` compares a
participant's answer with: label -> (arguments the answer is called with, expected value).
"""
