from ampfleet.cli import main

main()
