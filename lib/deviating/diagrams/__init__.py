"""Diagrams the book draws with matplotlib (never pasted images), one module per diagram: each
function draws on the axes it is given and returns them."""
