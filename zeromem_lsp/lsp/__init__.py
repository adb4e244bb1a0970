"""The LSP adapter: the pygls server (`server`), every LSP type (`convert`) and the stdin pipe reader (`pipe_io`)."""
