"""Data sources and their task rules: Sudoku, Maze, ARC (building, evaluating, solving)."""
