"""The cluster view: what the engines read and write through. Watch-driven caches of the objects Berth owns
(caches), which optional APIs the cluster serves (discovery), and the view (view.Cluster) that answers reads from
the caches, records our writes in them, and says what is ours and what is served."""
