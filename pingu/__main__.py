from pingu.cli import main

main()
