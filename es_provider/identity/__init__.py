"""Who a user is: the principal store's documents (directory, pure) and a subject's groups, read from the store and
cached (principals). Imports core, config, engine and search's neutral models; nothing that serves HTTP."""
