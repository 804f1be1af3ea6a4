"""The local analysts' HTTP interface, served by the sink that holds the embedded engine."""
