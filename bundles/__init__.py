"""The config plane: loading, kinds, references and validation. Imports protocol."""
