"""What the tests (and bench/) share: request builders (calls), the one permission oracle (oracle) and the corpora
it judges (acl_corpus, acl_random), knowledge base and key setup (setup), the served-process launcher and load
generator runner (served), and the engine proxy (proxy)."""
