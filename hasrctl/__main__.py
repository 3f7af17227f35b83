from hasrctl.cli import main

main()
