"""Human annotation: Label Studio projects, the built-in annotation page, and agreement."""
