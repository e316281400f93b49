from redismem.cli import main

main()
