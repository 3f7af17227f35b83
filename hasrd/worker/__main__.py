from hasrd.worker.main import main

raise SystemExit(main())
