"""The book's figures and widgets. Nothing here changes global matplotlib settings."""
