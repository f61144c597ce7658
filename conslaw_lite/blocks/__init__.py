"""The neural-network blocks whose laws the book studies, as torch modules."""
