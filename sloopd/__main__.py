from sloopd.cli import main

main()
