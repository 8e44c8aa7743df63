"""Tables: pandera schemas, the frozen split, atomic I/O and the vendored external datasets."""
