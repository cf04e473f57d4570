"""The raw REST client: one small generic layer over the official kubernetes client, addressing objects by
apiVersion and kind through the table of kinds (core.kinds). It knows no caches: the cluster view does."""
