"""Above the library: results, the report writer, the selection matrix, tables on the terminal."""
