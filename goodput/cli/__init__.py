"""The command line: argument parsing, input validation and rendering; no Temporal here."""
