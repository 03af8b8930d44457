"""Read-only reports: the inventory of log dirs (``scan``), segment and index dumps (``dump``), and the report of a
run as a table, a summary and an HTML page (``run_report``, ``report_page``, ``templates``)."""
