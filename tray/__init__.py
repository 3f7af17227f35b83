"""hasr-tray: a tray icon that follows the daemon, a drop window, and desktop notifications.

Pure parts (no display needed): ``icons``, ``state``, ``menu``, ``output``, ``settings``. The rest talks to
X (``app``, ``dropwin``), the daemon (``client``, ``watch``) or D-Bus (``notify``); ``single`` keeps one tray
per display.
"""
