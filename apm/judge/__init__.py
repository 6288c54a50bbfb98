"""``apm-judge``: the deterministic gate plus the Appendix A.3 LLM judge, as its own cached stage."""
