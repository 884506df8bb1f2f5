"""ProtoBias (arXiv 2601.04946): taxonomy, prompt triplets and their judges, rendering, image
quality control, the split, scoring of T2I metrics and ProtoScore."""
