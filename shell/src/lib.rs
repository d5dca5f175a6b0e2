//! The gsh shell: command language, REPL and output, over the engine.
