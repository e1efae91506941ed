"""The three platforms' protocols, each a pure reading of its specification over edge's kit: SparkTide (sparktide,
sparktide_items), Huawei AgentArts (agentarts) and Dify (dify). Each builds a neutral search request from its body
and answers a neutral result. Imports edge and below, never the engine directly, never SCIM or the web layer."""
