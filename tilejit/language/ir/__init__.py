"""The tile IR: types, ops, printer, verifier and passes."""
