"""What the tests share: request builders (calls), the one permission oracle (oracle) and the corpora it judges
(acl_corpus, acl_random), knowledge base and key setup (setup), and the served configs (served). What they share with
bench/ (the served-process launcher, the load generator, the engine proxy and its TLS front, the rerank server) is in
harness/."""
