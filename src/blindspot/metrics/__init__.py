"""The T2I metric plug-ins, one module each; their contract and registry are `blindspot.plugins`."""
