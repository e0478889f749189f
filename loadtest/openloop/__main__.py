from loadtest.openloop.cli import main

main()
